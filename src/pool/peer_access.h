// Peer access to pool memory.
//
// A program that calls cuCtxEnablePeerAccess (cudaDeviceEnablePeerAccess; PyTorch does before a copy
// between GPUs) expects kernels and copies of its current device to reach every cuMemAlloc
// allocation of the peer device, made before or after. The driver's peer access does not reach VMM
// mappings: a mapping is reachable only from the devices cuMemSetAccess named (on two H200s, driver
// 580, PyTorch copies and a CuPy kernel across the GPUs failed with a CUDA kernel error on pool
// memory). So uvmpool keeps the answer itself, here:
//   - which devices may reach each device's memory (the peers the program enabled), and
//   - every range mapped on each device: the pool's mappings (Vmm::map) and CUDA IPC imports.
// A range mapped gets access for its device and that device's peers; an enable walks the ranges
// already mapped on the peer device and grants the new accessor; a disable revokes it.
//
// Locking: one mutex, a leaf, guards both tables; it is held across fork, and a forked child starts
// with empty tables (the parent's mappings are not its own). Driver calls are made outside it: a range noted
// before an enable is walked by the enable, one noted after reads the new peer set. A range unmapped
// while an enable walks it makes that one cuMemSetAccess fail, which is harmless (logged at debug).
// A disable racing a mapping may leave that one range reachable from the revoked device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

class PeerAccess {
 public:
  static constexpr int kMaxDevices = 64;  // devices are bits of a word

  static PeerAccess& get();

  // [va, va + bytes) was just mapped (all of it) for `device`: notes it and gives read-write access
  // to the device and its peers in one cuMemSetAccess. On failure nothing is noted.
  CUresult grant(const driver::Table& d, int device, CUdeviceptr va, std::size_t bytes);
  // [va, va + bytes) is about to be unmapped: forgets it (a part of a noted range is cut out of it).
  void forget(CUdeviceptr va, std::size_t bytes);

  // The program's context on `accessor` enabled (disabled) peer access to `owner`'s context.
  void enabled(const driver::Table& d, int accessor, int owner);
  void disabled(const driver::Table& d, int accessor, int owner);

  // Devices that may reach `owner`'s memory besides itself (bit i: device i). For tests and logs.
  std::uint64_t peers_of(int owner);
  // Ranges noted (for tests).
  std::size_t ranges();

 private:
  struct Range {
    std::size_t bytes;
    int device;
  };
  void set_access(const driver::Table& d, int accessor, int owner, CUmemAccess_flags flags);

  static void lock_for_fork();
  static void unlock_after_fork();
  static void empty_in_child();

  Mutex mu_;
  std::map<CUdeviceptr, Range> ranges_ UVMPOOL_GUARDED_BY(mu_);  // by start
  std::uint64_t peers_[kMaxDevices] UVMPOOL_GUARDED_BY(mu_) = {};
};

}  // namespace uvmpool::pool
