// Frees put off while a graph capture is under way in the allocation's context.
//
// The pool's cuMemFree does not wait for the device: memory stays mapped, so later work queued behind
// the work that used it is safe, and the wait (a cuCtxSynchronize in the allocation's context) is made
// only before freed memory is unmapped (DevicePool::fence_unmap). During a graph capture in that
// context the driver refuses that wait and spoils the capture (captures.h), so the fence leaves the
// context for after it. Memory freed during the capture was then unmapped without the wait: a slab
// emptied by the free, a cached mapping taken apart for another size, a guard mapping at once, while
// work queued before the capture on another stream could still read it. A program may free there: in
// relaxed mode the driver allows a cuMemFree (its own waits for that work), and uvmpool's free must not
// spoil a capture in any mode.
//
// So such a free is held here: the allocation stays live and mapped, nothing reuses or unmaps it, and
// once the capture is over it is freed like any other (Pool::release_held), its wait left to the first
// fence after. A second free of a held pointer is a double free. Stream-ordered frees are not held:
// theirs is an event on the freeing stream (pending_frees.h), which a capture elsewhere does not spoil.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

class HeldFrees {
 public:
  struct Held {
    CUdeviceptr p = 0;
    CUcontext context = nullptr;  // whose capture it waits out, and whose work the free then waits for
  };

  // Nothing held: read without the lock on every free and allocation.
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }
  // Holds the free of `p`, allocated in `context`; false when `p` is held already (a double free).
  bool hold(CUdeviceptr p, CUcontext context);
  bool holds(CUdeviceptr p) const;
  // Takes out the held frees whose context `capturing` (asked once per context, under the lock: it
  // must take no lock but leaves) says captures no longer, and those of `gone` (a context being
  // destroyed; nullptr: none).
  std::vector<Held> take(const std::function<bool(CUcontext)>& capturing, CUcontext gone = nullptr);

 private:
  mutable Mutex mu_;  // takes only leaves (Captures::mu_) under it
  std::vector<Held> held_ UVMPOOL_GUARDED_BY(mu_);
  std::atomic<std::size_t> count_{0};  // held_.size()
};

}  // namespace uvmpool::pool
