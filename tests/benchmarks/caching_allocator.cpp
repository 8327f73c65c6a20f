#include "caching_allocator.h"

#include <algorithm>
#include <iterator>

namespace uvmpool::bench {
namespace {

constexpr std::size_t kRound = 512;
constexpr std::size_t kMiB = 1 << 20;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::size_t segment_bytes(std::size_t request) {
  if (request <= kMiB) return 2 * kMiB;
  if (request < 10 * kMiB) return 20 * kMiB;
  return round_up(request, 2 * kMiB);
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  for (const auto& [base, size] : segment_size_) driver_.cuMemFree_v2(base);
}

CUresult CachingAllocator::new_segment(std::size_t bytes) {
  CUdeviceptr base = 0;
  CUresult status = driver_.cuMemAlloc_v2(&base, bytes);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    ++oom_retries_;
    release_free_segments();
    status = driver_.cuMemAlloc_v2(&base, bytes);
  }
  if (status != CUDA_SUCCESS) return status;
  segment_size_[base] = bytes;
  blocks_[base] = Block{bytes, base, true};
  free_.insert(base);
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_count_;
  return CUDA_SUCCESS;
}

void CachingAllocator::release_free_segments() {
  for (auto it = segment_size_.begin(); it != segment_size_.end();) {
    const auto block = blocks_.find(it->first);
    if (block->second.free && block->second.size == it->second) {  // one free block spans it
      driver_.cuMemFree_v2(it->first);
      free_.erase(it->first);
      blocks_.erase(block);
      reserved_ -= it->second;
      it = segment_size_.erase(it);
    } else {
      ++it;
    }
  }
}

CUresult CachingAllocator::allocate(CUdeviceptr* out, std::size_t bytes) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t size = round_up(bytes, kRound);
  auto fits = [&](CUdeviceptr p) { return blocks_.at(p).size >= size; };
  auto found = std::find_if(free_.begin(), free_.end(), fits);
  if (found == free_.end()) {
    const std::size_t segment = segment_bytes(size);
    if (CUresult status = new_segment(segment); status != CUDA_SUCCESS) return status;
    // The new segment is the only free block of that size or more in it; search again from it.
    found = std::find_if(free_.begin(), free_.end(), fits);
  }
  const CUdeviceptr p = *found;
  free_.erase(found);
  Block& block = blocks_.at(p);
  if (block.size - size >= kRound) {
    blocks_[p + size] = Block{block.size - size, block.segment, true};
    free_.insert(p + size);
    block.size = size;
  }
  block.free = false;
  *out = p;
  return CUDA_SUCCESS;
}

void CachingAllocator::deallocate(CUdeviceptr p) {
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free) return;
  it->second.free = true;
  // Merge with the next block, then with the previous one, when free and of the same segment.
  if (auto next = std::next(it); next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    it->second.size += next->second.size;
    free_.erase(next->first);
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      prev->second.size += it->second.size;
      blocks_.erase(it);
      return;  // prev is already in free_
    }
  }
  free_.insert(p);
}

}  // namespace uvmpool::bench
