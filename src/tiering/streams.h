// The program's streams, as the mover must know them to hold the program's work still around a remap
// (mover.h says why). It needs, for every context the program runs work in, a handle through which
// an event covers all work queued so far and a wait holds all work queued later:
//   - the legacy default stream of each context covers every *blocking* stream of it: work on the
//     legacy stream waits for all earlier work of the blocking streams, and they for it. That includes
//     the per-thread default streams (blocking by definition), which another thread cannot name;
//   - each stream created CU_STREAM_NON_BLOCKING (PyTorch's side streams, NCCL's) is ordered with
//     nothing, so it is fenced by its own handle.
// The hooks report streams as they are made and destroyed (cuStreamCreate, cuStreamCreateWithPriority,
// cuStreamDestroy), contexts as they are made or retained (cuCtxCreate, cuDevicePrimaryCtxRetain) and
// the contexts launches run in; the mover fences what is listed, under the
// registry's lock, so no listed stream is destroyed while it records on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "tiering/host_wait_gate.h"

namespace uvmpool::tiering {

class StreamRegistry {
 public:
  // The process's registry (exists from the first call on: streams made before the pool are listed).
  static StreamRegistry& process();

  // The mover's hold in force (mover.h): streams wait for the flag at `flag` to reach `value`.
  struct Hold {
    CUdeviceptr flag = 0;  // 0: no hold
    std::uint32_t value = 0;
  };
  // After a stream was made in `context` (the creating thread's current one; `stream` nullptr: only
  // the context's legacy stream listed). Answers the hold in force, if any: the caller makes the new
  // stream wait for it too (a stream made during a hold must not run work on memory being remapped);
  // if the hold ends meanwhile, the wait passes at once.
  Hold created(CUstream stream, CUcontext context, bool non_blocking);
  // After a context was made or retained (cuCtxCreate, cuDevicePrimaryCtxRetain): listed at once, so
  // that holds cover it before a launch in it shows it, and with a hold in force its legacy stream,
  // which orders every blocking stream of it, waits for the hold's end.
  void context_made(const driver::Table& d, CUcontext context);
  // Before cuStreamDestroy: once destroyed, the handle may name another stream. The driver still runs
  // what the stream has queued, so a listed non-blocking stream gets an event recorded on it first,
  // which the mover's fences and holds wait for until it has completed (retiring).
  void destroying(CUstream stream, const driver::Table* driver = nullptr);
  // A context the program runs work in (its legacy stream is fenced). Cheap when the calling thread
  // reported the same context last.
  void saw_context(CUcontext context);
  // A context that is gone (fencing it failed): forgotten with its streams.
  void forget_context(CUcontext context);
  // Whether destroyed streams get a retiring event: once something may move (a Tiering in auto mode
  // made, or a mover's first epoch); until then nothing waits for them and the destroy stays as it was.
  void keep_retiring() { keep_retiring_.store(true, std::memory_order_release); }
  // A stream handle the driver no longer knows (fencing it failed): forgotten.
  void forget_stream(CUstream stream) { destroying(stream); }

  // A stream of the program: a created one, or CU_STREAM_LEGACY of `context`. The mover fences those
  // marked `fence` (the legacy streams and the non-blocking ones) and asks every one whether it is
  // capturing a graph (then nothing may be recorded on the legacy stream).
  struct Target {
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    bool fence = true;
  };
  // The work of a destroyed stream still queued: an event after it, in the stream's context.
  struct Retiring {
    CUcontext context = nullptr;
    CUevent event = nullptr;  // the registry's: the mover queries it, the registry destroys it
    // Holds that wait for it (Mover::Held, the event lent, not owned): destroyed only once complete and
    // given back by every one, or the next hold or destroy could free a handle a standing hold still
    // waits on (the driver may hand it out again at once: the simulator did).
    std::uint32_t lent = 0;
  };
  // Runs fn(const std::vector<Target>&, Hold&, std::vector<Retiring>&) with the registry locked: no
  // listed stream is destroyed, and none is made unseen, meanwhile. The mover sets the Hold when it
  // holds the streams, and drops the retiring entries it found complete.
  template <typename Fn>
  auto with_targets(Fn&& fn) {
    MutexLock lock(mu_);
    return fn(static_cast<const std::vector<Target>&>(targets_), hold_, retiring_);
  }
  void end_hold() {
    MutexLock lock(mu_);
    hold_ = {};
  }
  // A retiring stream's event lent to a hold (with_targets) is given back: the hold waited for it or
  // forgot it. Destroyed later, by the registry.
  void returned(CUevent event);

  std::size_t size() const;
  std::size_t retiring_count() const;  // destroyed streams' events kept (for tests)
  // In a forked child: empty, no hold, every gate open (config::at_fork, registered by process()).
  void reset_in_child();

  // The program's calls that wait on the host for queued work pass it; the mover closes it around
  // each hold (host_wait_gate.h says why).
  HostWaitGate& host_waits() { return host_waits_; }
  // The submission gates (host_wait_gate.h). The program's calls that queue work touching memory
  // (launches, copies, memsets, graph launches: hooks/shown.h) pass `submissions` for their driver
  // call; the mover closes it while it places a hold. Those whose addresses the driver resolves when
  // they are called (copies, memsets, graph launches) pass `remaps` too; the mover closes it around a
  // commit's remaps. Launches pass the remaps: a kernel's pointers are read when it runs.
  HostWaitGate& submissions() { return submissions_; }
  HostWaitGate& remaps() { return remaps_; }

 private:
  void add_context_locked(CUcontext context) UVMPOOL_REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Target> targets_ UVMPOOL_GUARDED_BY(mu_);  // a few dozen entries
  Hold hold_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<Retiring> retiring_ UVMPOOL_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> generation_{1};
  std::atomic<bool> keep_retiring_{false};  // renewed when a context is forgotten (see saw_context)
  HostWaitGate host_waits_;
  HostWaitGate submissions_;
  HostWaitGate remaps_;
};

}  // namespace uvmpool::tiering
