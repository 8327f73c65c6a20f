#include "tiering/hold_breaker.h"

#include "config/log.h"

namespace uvmpool::tiering {

void raise_flag(volatile std::uint32_t* flag, std::uint32_t value) {
  std::uint32_t now = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
  while (now < value && !__atomic_compare_exchange_n(flag, &now, value, false, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
  }
}

void HoldBreaker::set_flag(volatile std::uint32_t* flag) {
  MutexLock lock(mu_);
  flag_ = flag;
}

void HoldBreaker::set_gate(HostWaitGate* gate) {
  MutexLock lock(mu_);
  gate_ = gate;
}

std::uint64_t HoldBreaker::gate_opens() {
  MutexLock lock(mu_);
  return gate_opens_;
}

bool HoldBreaker::may_hold(std::uint32_t value, std::uint64_t opens) {
  MutexLock lock(mu_);
  if (waiting_ != 0 || opens != gate_opens_) return false;
  if (value > last_hold_) last_hold_ = value;
  return true;
}

bool HoldBreaker::pool_waiting() {
  MutexLock lock(mu_);
  return waiting_ != 0;
}

bool HoldBreaker::broken(std::uint32_t value) {
  MutexLock lock(mu_);
  return value <= released_through_;
}

// The window's lock is taken here and let go by its owner (std::unique_lock): outside what the lock
// annotations can follow.
bool HoldBreaker::open_commit(std::uint32_t value, std::unique_lock<std::mutex>* window) UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
  std::unique_lock lock(mu_.native());
  if (value <= released_through_) return false;
  *window = std::move(lock);
  return true;
}

bool HoldBreaker::release_locked() {
  if (flag_ == nullptr || last_hold_ <= released_through_) return false;
  // Every hold recorded so far lets the program's work through; a hold being recorded now (may_hold
  // said yes before this) has its value in last_hold_ already, so its wait passes at once.
  raise_flag(flag_, last_hold_);
  released_through_ = last_hold_;
  if (gate_ != nullptr) {  // after the flag: what waited at the gate finds its streams going
    gate_->open();
    ++gate_opens_;
  }
  return true;
}

bool HoldBreaker::release_all() {
  MutexLock lock(mu_);  // waits for a commit window to close
  return release_locked();
}

void HoldBreaker::before_device_wait() noexcept {
  MutexLock lock(mu_);  // waits for a commit window to close
  ++waiting_;
  if (!release_locked()) return;
  breaks_.fetch_add(1, std::memory_order_relaxed);
  log::debug("tiering: a pool path waits for the device; the holds up to {} are released, their moves dropped",
             last_hold_);
}

void HoldBreaker::after_device_wait() noexcept {
  MutexLock lock(mu_);
  --waiting_;
}

}  // namespace uvmpool::tiering
