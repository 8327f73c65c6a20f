// The hold breaker: releases the mover's standing holds when a pool path is about to wait for the
// device, so that such a wait never meets a hold (pool/device_waits.h says why it would never end).
//
// A hold is a cuStreamWaitValue32 on the mover's flag, placed on every stream of the program, that
// the mover's epoch releases by raising the flag to the hold's value once its commit is done. With
// holds ahead, several stand at once, each released only when the mover completes its epoch, and
// completing takes the pool's lock (DevicePool::mu_). A program thread that holds that lock and waits
// for the device (a free's fence before an unmap: cuCtxSynchronize) then waits for the holds, and the
// mover for the lock, for good: no watchdog runs, since the mover waits for the lock, not for a hold.
// It fits how a DDP rank hung on two H200s (docs/gpu-results.md, tenth session), and the simulator
// shows it (Mover_.APoolWaitUnderItsLockReleasesTheStandingHoldsAndTheirEpochsCommitNothing).
//
// So, before such a wait (before_device_wait), the breaker raises the flag to the value of the last
// hold recorded: every standing hold lets the program's work through at once. An epoch whose hold was
// broken commits nothing (its streams ran on while it would have remapped): the mover asks
// open_commit, which says so. No hold is placed while a pool wait is under way (may_hold), so the
// wait cannot meet one placed after the break. Safety of the break against a commit in progress: a
// commit's remaps run inside a commit window (open_commit to the window's end), and a break waits
// for the window to close; the window is opened under the device's pool lock, after the hold
// drained and the copies are done (with pipelined copies, for each move's remap alone, once its own
// copy is done), so it is short and never waits for the device.
//
// The mover's stall guard (mover.h) uses the same release when the mover's thread has made no progress
// for twice the hold timeout while holds stand: whatever the mover waits for then (a lock, a driver
// call behind a hold), the program's work goes on.
//
// A release also opens the host-wait gate (host_wait_gate.h): with no hold standing nothing needs the
// program's calls kept out of the driver, and a call waiting there (a synchronous copy, a kernel load)
// may be what the released work, or the pool's wait, needs. Before, the gate stayed closed until the
// mover completed the released epochs, which takes the pool's lock the waiting path holds, and after a
// stall guard's release the program's calls stayed stopped as long as the mover. The mover closes the
// gate again before its next hold; a release that comes between its close and its hold (counted by
// gate_opens) makes may_hold refuse that hold, so no hold ever stands with the gate open.
//
// Lock order: the mover's epoch lock, then the pool's locks (DevicePool::mu_; async_mu_ on its own),
// then mu_ here, then the gate's own lock (HostWaitGate::open). Nothing here waits for the device.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "config/thread_safety.h"
#include "pool/device_waits.h"
#include "tiering/host_wait_gate.h"

namespace uvmpool::tiering {

// Raises the flag to `value`, never lowering it (a later hold's value may be written already).
void raise_flag(volatile std::uint32_t* flag, std::uint32_t value);

class HoldBreaker final : public pool::DeviceWaits {
 public:
  // The mover's flag, once it has one (it lives as long as the mover).
  void set_flag(volatile std::uint32_t* flag);
  // The gate a release opens (the mover's; it outlives the breaker's use of it).
  void set_gate(HostWaitGate* gate);
  // How many releases have opened the gate so far: read before the mover closes the gate for a hold.
  std::uint64_t gate_opens();
  // Before a hold with `value` is recorded on the program's streams, whose gate was closed when
  // gate_opens() said `opens`: false while a pool path waits for the device (the hold would stall that
  // wait), or when a release has opened the gate since (the hold would stand with the gate open): the
  // caller places none.
  bool may_hold(std::uint32_t value, std::uint64_t opens);
  // Whether the hold with `value` was broken: its epoch must commit nothing.
  bool broken(std::uint32_t value);
  // Whether a pool path waits for the device now (a hint: may_hold decides).
  bool pool_waiting();
  // At an epoch's commit, after its hold drained: false when the hold was broken (nothing may commit);
  // true with `window` holding the breaker's lock, which no break passes until the window is reset
  // (after the remaps).
  bool open_commit(std::uint32_t value, std::unique_lock<std::mutex>* window);
  // Holds broken so far (each pool wait breaks the holds standing at the time, counted once).
  std::uint64_t breaks() const { return breaks_.load(std::memory_order_relaxed); }

  // Releases every hold recorded so far (the stall guard); false when none was standing unreleased.
  bool release_all();

  void before_device_wait() noexcept override;
  void after_device_wait() noexcept override;

 private:
  bool release_locked() UVMPOOL_REQUIRES(mu_);

  Mutex mu_;
  volatile std::uint32_t* flag_ UVMPOOL_GUARDED_BY(mu_) = nullptr;
  HostWaitGate* gate_ UVMPOOL_GUARDED_BY(mu_) = nullptr;
  std::uint64_t gate_opens_ UVMPOOL_GUARDED_BY(mu_) = 0;  // releases that opened the gate
  std::uint32_t last_hold_ UVMPOOL_GUARDED_BY(mu_) = 0;         // the value of the last hold recorded
  std::uint32_t released_through_ UVMPOOL_GUARDED_BY(mu_) = 0;  // holds up to this value were broken
  std::uint32_t waiting_ UVMPOOL_GUARDED_BY(mu_) = 0;           // pool paths inside a wait for the device
  std::atomic<std::uint64_t> breaks_{0};
};

}  // namespace uvmpool::tiering
