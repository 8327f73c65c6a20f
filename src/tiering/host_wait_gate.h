// The program's calls that wait on the host for queued work, and the mover's holds, never overlap.
//
// Why. A synchronous copy (cuMemcpy, cuMemcpyHtoD, cuMemcpyDtoH, ...) and a copy from or to pageable
// host memory (which the driver makes synchronous, cuMemcpyHtoDAsync included) wait inside the driver
// for the work queued before them. Behind a hold (mover.h: a cuStreamWaitValue32 on the program's
// streams) that wait lasts until the flag is written. Measured on an H100 with driver 580
// (tests/gpu/hold_blocking.cu, docs/gpu-results.md): while one thread waits so, every other thread's
// copy, cuMemMap, cuMemSetAccess, cuMemUnmap and event destroy waits too (a synchronize does not). The
// mover, which needs those calls to finish the epoch and write the flag, then stood still until its
// watchdog gave the hold up: GPT-2 training under UVMPOOL_TIERING=auto had every hold given up after
// 10 s, since each step copies its tokens in and its loss out.
//
// How. The hooks of those calls (src/hooks/host_wait_hooks.cpp) pass the gate: while the mover holds, or is
// about to, the call waits at the gate, outside the driver, holding no lock; the hold ends within an
// epoch. The mover closes the gate before it places a hold and waits for the calls already inside the
// driver to return (their work was queued before the hold, so they end without it); it opens the gate
// when it writes the flag. A call that would not have waited (a pinned asynchronous copy) waits at a
// closed gate too: the gate cannot tell, and the stream is held anyway.
//
// The first launch of a lazily loaded kernel (CUDA_MODULE_LOADING=LAZY, the default) does the same
// inside the driver, measured on the same H100; with EAGER loading launches did not. A function's first
// launch therefore passes the gate too (Tiering::before_launch), and so do cuMemAllocHost, cuMemHostAlloc
// and cuMemFreeHost (an allocation and free of pinned memory blocked as a pair), and a cuMemFree of
// memory not the pool's (the driver's free waits for the device; the pool frees without the driver).
// The strided, peer and batched copies pass it by the same rule as the flat ones (transfer_hooks.cpp),
// by analogy: they were not measured apart. So, until the function is loaded, do the calls on a function
// that load it (its attributes, occupancy and cache preference, cuFuncLoad: Tiering::begin_loading_call).
// Not hooked at all: calls outside uvmpool's driver list that may wait the same way (cuModuleGetGlobal,
// cuLibraryGetGlobal, ...).
//
// The submission gates. The same class serves two more gates (tiering/streams.h), passed by the
// hooked calls that queue work touching memory (hooks/shown.h), for the driver call alone:
//   - `submissions`, by launches, copies, memsets and graph launches, closed while the mover places
//     a hold: a hold is an event recorded and then a wait, on each stream, and work another thread
//     queued between the two would run on unseen by the event while the commit remaps its memory
//     (on an H200 a kernel then hit the unmapped range, error 700, in half the training runs; the
//     simulator's race detector caught a copy and a launch so);
//   - `remaps`, by copies, memsets and graph launches, closed around a commit's remaps: the driver
//     resolves their addresses when they are called, and refuses one whose range is unmapped at that
//     moment (CUDA_ERROR_INVALID_VALUE), or, for cuMemcpyAsync, waits for the held work and breaks
//     the context (H200, driver 580, tests/gpu/remap_enqueue.py; work queued before the remap runs on
//     the new pieces, by address). A kernel's pointers are read when it runs: launches pass.
// A call inside the driver then is only queueing work (a wait for queue room happens outside,
// Tiering::wait_for_queue_room); one staying past MoverConfig::gate_patience puts the hold off, or
// makes the epoch commit nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>

#include "config/thread_safety.h"

namespace uvmpool::tiering {

class HostWaitGate {
 public:
  // Program side: a call that may wait on the host, from entering the driver to returning.
  class Pass {
   public:
    // `enabled` false: passes without entering (a hook that passes the gate only for some calls).
    explicit Pass(HostWaitGate& gate, bool enabled = true) : gate_(gate), enabled_(enabled) {
      if (enabled_) gate_.enter();
    }
    ~Pass() {
      if (enabled_) gate_.leave();
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    HostWaitGate& gate_;
    const bool enabled_;
  };

  // The same by hand, where entering and leaving happen in two calls (Tiering::before_launch and
  // after_launch, around a function's first launch). Every enter() needs its leave().
  void enter();
  void leave();

  // Mover side. close() first lets in the calls a previous open() woke (so back-to-back holds cannot
  // starve them), then stops new calls and waits up to `timeout` for those inside the driver to
  // return; false when some did not (the gate is open again, no hold may be placed). open() lets the
  // waiting calls go; harmless when not closed.
  bool close(std::chrono::milliseconds timeout);
  void open();

  // Whether a call waits at the closed gate now (the mover then places no further hold).
  bool has_waiters() const { return waiting_.load(std::memory_order_seq_cst) != 0; }
  // Now, for the statistics: whether the gate is closed, and how many calls wait at it.
  bool closed() const { return closed_.load(std::memory_order_relaxed); }
  int waiters() const { return waiting_.load(std::memory_order_relaxed); }

  // Calls that waited at a closed gate since the start.
  std::uint64_t waited() const { return waited_.load(std::memory_order_relaxed); }

  // In a forked child (one thread, the parent's others gone): open, nothing inside or waiting, its
  // lock new (it may have been held by a thread that is not there).
  void reset_in_child();

 private:
  // Dekker's order, both seq_cst: a call counts itself in, then looks at closed_; the mover sets
  // closed_, then looks at inside_. One of the two sees the other.
  std::atomic<bool> closed_{false};
  std::atomic<int> inside_{0};
  std::atomic<std::uint64_t> waited_{0};
  // Calls waiting at the closed gate; changed under mu_. close() lets those an open() woke in first.
  std::atomic<int> waiting_{0};
  static constexpr std::chrono::milliseconds kLetInTimeout{100};
  Mutex mu_;                    // for the two waits below; the fast path takes no lock
  std::condition_variable cv_;  // closed_ fell, or inside_ reached 0 while closed (mu_)
};

}  // namespace uvmpool::tiering
