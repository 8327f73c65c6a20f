// The driver's virtual memory management calls the pool makes, each sequence in one place with its
// rollback: when any step fails, everything the sequence did is undone and the first error returned,
// so a failed allocation never leaves a handle, a mapping or a reservation behind.
#pragma once

#include <cstddef>
#include <span>

#include "driver/driver_api.h"

namespace uvmpool::pool {

using Handle = CUmemGenericAllocationHandle;

class Vmm {
 public:
  Vmm(const driver::Table& driver, int device) : d_(driver), device_(device) {}

  const driver::Table& driver() const { return d_; }
  int device() const { return device_; }

  // The minimum allocation granularity of pinned memory on this device (0 if the driver refuses).
  std::size_t granularity() const;

  // `count` new physical chunks of `size` bytes each on the device, or none at all.
  CUresult create_chunks(std::span<Handle> out, std::size_t size) const;
  void release_chunks(std::span<const Handle> chunks) const;

  CUresult reserve(CUdeviceptr* va, std::size_t size, std::size_t alignment) const;
  void free_reservation(CUdeviceptr va, std::size_t size) const;

  // Maps chunks[i] at va + i * chunk_size and gives the device read-write access to the whole range
  // with one cuMemSetAccess (one call over a range is far cheaper than one per chunk). All or nothing.
  CUresult map(CUdeviceptr va, std::span<const Handle> chunks, std::size_t chunk_size) const;
  // Unmaps `count` chunks mapped from va on. Errors are logged, not returned: there is nothing left
  // to roll back to.
  void unmap(CUdeviceptr va, std::size_t count, std::size_t chunk_size) const;

 private:
  const driver::Table& d_;
  int device_;
};

}  // namespace uvmpool::pool
