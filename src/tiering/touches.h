// What one launch touched: the pool memory its arguments point into.
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver/driver_api.h"

namespace uvmpool::tiering {

// No default member initializers: a LaunchTouches on the launching thread's stack is not zeroed (64
// entries, on every launch); add() writes whole entries. Touch{} still zeroes one.
struct Touch {
  CUdeviceptr address;   // the pointer as the kernel was given it (maybe inside an allocation)
  std::uintptr_t owner;  // the mapping or slab holding it (Pool::Probe::owner)
  bool host;             // its granule lay in host memory at the launch: the kernel reads it over PCIe
};

// A fixed array, filled on the launching thread with no allocation. A kernel rarely gets more than a
// dozen pointers; past kMax the rest are counted, not kept.
struct LaunchTouches {
  static constexpr std::size_t kMax = 64;
  Touch touches[kMax];
  std::size_t count = 0;
  std::size_t dropped = 0;
  std::size_t host = 0;  // of those kept, in host memory

  // Adds a touch unless the same address is already there.
  void add(const Touch& t) {
    for (std::size_t i = 0; i < count; ++i)
      if (touches[i].address == t.address) return;
    if (count == kMax) {
      ++dropped;
      return;
    }
    touches[count++] = t;
    if (t.host) ++host;
  }
};

}  // namespace uvmpool::tiering
