// How work sees memory: which tier each byte lies in (device, pinned host, pageable host) and whether
// a device may read or write it through the mappings as they stand. Kernels, memsets and copies use
// it while they execute, with the address space locked (shared), and report what they touched.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sim/address_space.h"
#include "sim/timeline.h"

namespace uvmpool::sim {

// What a kernel or memset of `device` touches. read() and write() check that [p, p + bytes) is mapped
// with access for the device, count its bytes per tier (times `passes`) and note the range; they
// answer nullptr where the device cannot reach the memory (the kernel then faults).
class DeviceMemory {
 public:
  DeviceMemory(AddressSpace& space, int device, Touches& touches) : space_(space), device_(device), touches_(touches) {}

  template <typename T>
  const T* read(std::uintptr_t p, std::uint64_t count, std::uint64_t passes = 1) {
    return static_cast<const T*>(reach(p, count, sizeof(T), false, passes));
  }
  template <typename T>
  T* write(std::uintptr_t p, std::uint64_t count, std::uint64_t passes = 1) {
    return static_cast<T*>(reach(p, count, sizeof(T), true, passes));
  }

 private:
  void* reach(std::uintptr_t p, std::uint64_t count, std::size_t size, bool write, std::uint64_t passes);

  AddressSpace& space_;
  int device_;
  Touches& touches_;
};

// Whether either side of a copy starts in pageable host memory (the real driver then makes an
// asynchronous copy synchronous). Caller holds the address space's lock (shared).
bool pageable_side(AddressSpace& space, std::uintptr_t dst, std::uintptr_t src);
// Counts a copy's bytes by path (device, pinned host, pageable host on either side) into `touches`
// and notes the ranges it touched inside the device address space. Both ranges must be valid.
void classify_copy(AddressSpace& space, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes, Touches& touches);

}  // namespace uvmpool::sim
