// An allocator of the expandable-segments kind, a second baseline of uvmpool-bench-fragmentation:
// what PyTorch's allocator does with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the peer closest
// to uvmpool's pool (both build allocations on the driver's VMM calls).
// - Two segments, each one address reservation of the device's memory plus an eighth: one for
//   requests up to 1 MiB, mapped in pages of 2 MiB, one for the rest, in pages of 20 MiB (PyTorch's
//   kSmallBuffer and kLargeBuffer). A page is one cuMemCreate handle and one cuMemMap; the pages a
//   growth maps get one cuMemSetAccess over their range.
// - Requests are rounded up to 512 B and served best-fit (smallest free block, then lowest address)
//   from the mapped part of their segment; a block larger than needed is split when at least 512 B
//   remain, and a freed block merges with its free neighbours, which are always in the same segment.
// - When no free block fits, the segment maps pages at the end of its mapped part, enough for the
//   request together with the free block the mapped part ends in.
// - Pages stay mapped: PyTorch unmaps wholly free pages when an allocation fails or at empty_cache(),
//   which this model does not do (the replay never fills the device, so it would not happen there).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "driver/driver_api.h"

namespace uvmpool::bench {

class ExpandableSegments {
 public:
  ExpandableSegments(const driver::Table& driver, CUdevice device, std::uint64_t device_memory);
  ~ExpandableSegments();
  ExpandableSegments(const ExpandableSegments&) = delete;
  ExpandableSegments& operator=(const ExpandableSegments&) = delete;

  CUresult allocate(CUdeviceptr* out, std::size_t bytes);
  void deallocate(CUdeviceptr p);

  std::uint64_t reserved() const { return reserved_; }  // bytes mapped
  std::uint64_t peak_reserved() const { return peak_reserved_; }
  std::uint64_t pages() const { return pages_made_; }

 private:
  struct Segment {
    std::size_t page = 0;
    CUdeviceptr base = 0;  // 0 until first used
    std::size_t reserved = 0;
    std::size_t mapped = 0;  // bytes mapped from base
    std::vector<CUmemGenericAllocationHandle> handles;  // one per page, in address order
    std::map<CUdeviceptr, std::pair<std::size_t, bool>> blocks;  // address -> size, free
    std::set<std::pair<std::size_t, CUdeviceptr>> free;          // (size, address): best fit
  };
  CUresult grow(Segment& s, std::size_t bytes);  // maps pages at the end for a request of `bytes`
  void release(Segment& s);

  const driver::Table& driver_;
  CUdevice device_;
  std::uint64_t device_memory_;
  Segment small_, large_;
  std::uint64_t reserved_ = 0, peak_reserved_ = 0, pages_made_ = 0;
};

}  // namespace uvmpool::bench
