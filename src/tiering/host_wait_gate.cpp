#include "tiering/host_wait_gate.h"

#include <new>

namespace uvmpool::tiering {

void HostWaitGate::enter() {
  inside_.fetch_add(1, std::memory_order_seq_cst);
  if (!closed_.load(std::memory_order_seq_cst)) return;
  // Closed: step back out (the mover may be waiting for inside_ to reach 0), wait for the open.
  leave();
  waited_.fetch_add(1, std::memory_order_relaxed);
  UniqueMutexLock lock(mu_);
  waiting_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    cv_.wait(lock.native(), [&] { return !closed_.load(std::memory_order_seq_cst); });
    inside_.fetch_add(1, std::memory_order_seq_cst);
    if (!closed_.load(std::memory_order_seq_cst)) break;
    // Closed again before this thread got in: out again (mu_ is held, so leave()'s notify is inline).
    if (inside_.fetch_sub(1, std::memory_order_seq_cst) == 1) cv_.notify_all();
  }
  // In: the next close() waited for this (waiting_), so a closing mover cannot starve the waiters.
  if (waiting_.fetch_sub(1, std::memory_order_seq_cst) == 1) cv_.notify_all();
}

void HostWaitGate::leave() {
  if (inside_.fetch_sub(1, std::memory_order_seq_cst) == 1 && closed_.load(std::memory_order_seq_cst)) {
    MutexLock lock(mu_);  // so the mover cannot miss the wake between its check and its wait
    cv_.notify_all();
  }
}

bool HostWaitGate::close(std::chrono::milliseconds timeout) {
  {
    // The calls the last open() woke get in first (bounded: they only need to be scheduled).
    UniqueMutexLock lock(mu_);
    cv_.wait_for(lock.native(), kLetInTimeout, [&] { return waiting_.load(std::memory_order_seq_cst) == 0; });
  }
  closed_.store(true, std::memory_order_seq_cst);
  UniqueMutexLock lock(mu_);
  if (cv_.wait_for(lock.native(), timeout, [&] { return inside_.load(std::memory_order_seq_cst) == 0; })) return true;
  lock.unlock();
  open();
  return false;
}

void HostWaitGate::reset_in_child() {
  closed_.store(false, std::memory_order_relaxed);
  inside_.store(0, std::memory_order_relaxed);
  waiting_.store(0, std::memory_order_relaxed);
  new (&mu_) Mutex;
  new (&cv_) std::condition_variable;
}

void HostWaitGate::open() {
  if (!closed_.load(std::memory_order_seq_cst)) return;
  {
    MutexLock lock(mu_);
    closed_.store(false, std::memory_order_seq_cst);
  }
  cv_.notify_all();
}

}  // namespace uvmpool::tiering
