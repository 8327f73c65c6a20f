// The pool's carving component on its own (src/pool/carved_range.h), as a fourth allocator of
// uvmpool-bench-fragmentation: every request carved at 512 B (PyTorch's rounding) from one address
// range of extents mapped once (--carve-extent-mib), made with cuMemCreate and kept when given back. What
// carving costs and holds before the device pool routes its allocations through it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "driver/driver_api.h"
#include "pool/carved_range.h"

namespace uvmpool::bench {

class CarvedReplay {
 public:
  static constexpr std::size_t kUnit = 512;
  // `bytes`: address space for the range (rounded down to whole extents of `extent` bytes, a power of
  // two multiple of the granularity).
  CarvedReplay(const driver::Table& driver, int device, std::uint64_t bytes, std::size_t extent);
  ~CarvedReplay();
  CarvedReplay(const CarvedReplay&) = delete;
  CarvedReplay& operator=(const CarvedReplay&) = delete;

  CUresult allocate(CUdeviceptr* out, std::size_t bytes);
  void deallocate(CUdeviceptr p);
  std::uint64_t peak_reserved() const;  // most slots ever mapped, in bytes
  pool::CarvedRange::Figures figures() const { return range_->figures(); }
  std::uint64_t extents_made() const;

 private:
  class Extents;
  pool::Vmm vmm_;
  std::unique_ptr<Extents> extents_;
  const std::size_t extent_;
  CUdeviceptr base_ = 0;
  std::size_t bytes_ = 0;
  std::optional<pool::CarvedRange> range_;
};

}  // namespace uvmpool::bench
