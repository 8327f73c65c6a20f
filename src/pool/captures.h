// The graph captures under way, as far as the pool's waits must know them.
//
// Measured on an H200 (driver 580, tests/fidelity/capture_test.cpp): while a stream of a context
// captures, cuCtxSynchronize in that context is refused and spoils the capture, in every capture mode,
// from any thread, even one in the relaxed interaction mode. The pool's wait before it unmaps freed
// memory (DevicePool::fence_unmap) is that call. So the hooks tell the pool of each capture begun and
// ended (src/hooks/graph_hooks.cpp), and:
//   - as a capture begins, it counts as under way for every other thread, and then the pool waits
//     for what was freed so far (Pool::capture_beginning): the wait the program's own cuMemFree would
//     have made before it, made once, and no free slips in between unwaited;
//   - during one, a free of memory allocated in its context is held until it is over (held_frees.h):
//     work queued before the capture on another stream may still use that memory, and the wait that
//     would see it end is refused. The fence leaves a capturing context listed for the first fence
//     after the capture (fence_unmap), for a free that reached the pool by no held route;
//   - a move's commit that must wait for memory freed on a stream of a capturing context answers
//     NOT_READY and stays prepared until the capture ends (DevicePool::fence_move). The mover commits
//     only with the program's streams held (no such wait), and puts off its epochs during captures.
// Whether a capture is still under way is asked of the driver each time (cuStreamIsCapturing, which
// any capture allows), so a capture whose end the hooks did not see (its stream destroyed, or ended
// through a route not hooked) is forgotten at the next wait. A per-thread default stream names
// another stream on each thread: its capture is asked about only on its own thread, at its end.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

class Captures {
 public:
  explicit Captures(const driver::Table& d) : d_(d) {}

  // Just before a capture of `stream` is asked of the driver (0 or CU_STREAM_LEGACY: the legacy stream
  // of `context`; CU_STREAM_PER_THREAD: the calling thread's), and on the same thread once it
  // answered: from the one to the other the capture counts as under way, so that no wait of another
  // thread slips in between the driver's begin and the pool's knowing of it.
  void beginning(CUcontext context, CUstream stream);
  void begun(CUstream stream, bool began);
  // After an end of `stream`'s capture was asked (whatever the driver answered: it is asked again).
  void ended(CUstream stream);
  // Whether a capture is under way in `context`, which the caller has made current. Ended ones are
  // forgotten on the way. One this thread is beginning does not count for this thread: the driver has
  // not been asked to begin it, so a wait now comes before it (Pool::capture_beginning's own fence).
  bool under_way(CUcontext context);
  // Whether any capture is known (under way, or being begun), without the lock.
  bool any() const { return any_.load(std::memory_order_acquire); }

 private:
  struct Capture {
    CUcontext context;
    CUstream stream;
    std::thread::id thread;  // who began it: a per-thread stream is known only on its own thread
    bool answered;           // the driver has answered its begin (and began it)
  };
  // Whether the driver says `c` no longer captures (or no longer names its stream). One it cannot be
  // asked about, being begun or another thread's per-thread stream, is not over.
  bool over(const Capture& c) const;

  const driver::Table& d_;
  Mutex mu_;  // a leaf: only cuStreamIsCapturing is called under it
  std::vector<Capture> captures_ UVMPOOL_GUARDED_BY(mu_);
  std::atomic<bool> any_{false};  // !captures_.empty(), read without the lock on every wait
};

}  // namespace uvmpool::pool
