// A caching allocator of the cudaMalloc kind, the baseline of uvmpool-bench-fragmentation: what
// PyTorch's default CUDA allocator does, without its small/large pool split.
// - Segments come from cuMemAlloc: 2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB, else the
//   request rounded up to 2 MiB (PyTorch's segment sizes).
// - Requests are rounded up to 512 B and served first-fit from free blocks in address order; a
//   block larger than needed is split when at least 512 B remain, and a freed block merges with free
//   neighbours of its segment.
// - Freed blocks stay cached; segments go back to the driver only when cuMemAlloc fails (then every
//   wholly free segment is freed and the allocation retried once), and in the destructor.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "driver/driver_api.h"

namespace uvmpool::bench {

class CachingAllocator {
 public:
  explicit CachingAllocator(const driver::Table& driver) : driver_(driver) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  CUresult allocate(CUdeviceptr* out, std::size_t bytes);
  void deallocate(CUdeviceptr p);

  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t peak_reserved() const { return peak_reserved_; }
  std::uint64_t segments() const { return segment_count_; }
  std::uint64_t retries_after_oom() const { return oom_retries_; }

 private:
  struct Block {
    std::size_t size;
    CUdeviceptr segment;  // base of the segment it belongs to
    bool free;
  };
  CUresult new_segment(std::size_t bytes);
  void release_free_segments();

  const driver::Table& driver_;
  std::map<CUdeviceptr, Block> blocks_;       // every block, by address (neighbours are adjacent)
  std::set<CUdeviceptr> free_;                // free blocks, by address: first fit
  std::map<CUdeviceptr, std::size_t> segment_size_;
  std::uint64_t reserved_ = 0, peak_reserved_ = 0, segment_count_ = 0, oom_retries_ = 0;
};

}  // namespace uvmpool::bench
