// What the pool tells about its own waits for the device, to whatever may hold the program's streams
// (tiering's mover, src/tiering/hold_breaker.h).
//
// A few pool paths wait for the device while holding a lock the mover needs: a free's fence before
// an unmap (DevicePool::fence_unmap, under DevicePool::mu_) and, rarely, the stream-ordered reuse's
// fallbacks (under PendingFrees's lock). Such a wait covers every stream of a context. If the mover has placed
// holds ahead on those streams (cuStreamWaitValue32 on a flag it writes only when it completes each
// epoch, which takes that same lock), the wait would never end: the lock's holder waits for the
// holds, the mover waits for the lock. So the pool says when it is about to wait, and the holder of
// the streams releases them first, and places no new hold until the wait is over.
#pragma once

#include <atomic>

namespace uvmpool::pool {

class DeviceWaits {
 public:
  // Before a wait for the device made by a pool path, on that path's thread (a pool lock may be
  // held): from its return until after_device_wait, no work of the program waits for the observer.
  virtual void before_device_wait() noexcept = 0;
  virtual void after_device_wait() noexcept = 0;

 protected:
  ~DeviceWaits() = default;
};

// Around one wait: tells the pool's observer, if one is installed (Pool::set_device_waits). The
// observer must outlive the waits it is told of (the process's mover is never destroyed; a test's
// stops before its pool does).
class DeviceWaitScope {
 public:
  explicit DeviceWaitScope(const std::atomic<DeviceWaits*>& observer)
      : observer_(observer.load(std::memory_order_acquire)) {
    if (observer_ != nullptr) observer_->before_device_wait();
  }
  ~DeviceWaitScope() {
    if (observer_ != nullptr) observer_->after_device_wait();
  }
  DeviceWaitScope(const DeviceWaitScope&) = delete;
  DeviceWaitScope& operator=(const DeviceWaitScope&) = delete;

 private:
  DeviceWaits* const observer_;
};

}  // namespace uvmpool::pool
