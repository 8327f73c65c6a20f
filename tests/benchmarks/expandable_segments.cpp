#include "expandable_segments.h"

#include <algorithm>
#include <iterator>

namespace uvmpool::bench {
namespace {

constexpr std::size_t kRound = 512;
constexpr std::size_t kMiB = 1 << 20;
constexpr std::size_t kSmallRequest = kMiB;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

ExpandableSegments::ExpandableSegments(const driver::Table& driver, CUdevice device, std::uint64_t device_memory)
    : driver_(driver), device_(device), device_memory_(device_memory) {
  small_.page = 2 * kMiB;
  large_.page = 20 * kMiB;
}

ExpandableSegments::~ExpandableSegments() {
  release(small_);
  release(large_);
}

void ExpandableSegments::release(Segment& s) {
  if (s.base == 0) return;
  for (std::size_t i = 0; i < s.handles.size(); ++i) {
    driver_.cuMemUnmap(s.base + i * s.page, s.page);
    driver_.cuMemRelease(s.handles[i]);
  }
  driver_.cuMemAddressFree(s.base, s.reserved);
  const std::size_t page = s.page;
  s = Segment{};
  s.page = page;
}

CUresult ExpandableSegments::grow(Segment& s, std::size_t bytes) {
  if (s.base == 0) {
    s.reserved = round_up(device_memory_ + device_memory_ / 8, s.page);
    if (CUresult r = driver_.cuMemAddressReserve(&s.base, s.reserved, 0, 0, 0); r != CUDA_SUCCESS) {
      s.base = 0;
      return r;
    }
  }
  // The free block the mapped part ends in, if any, counts toward the request.
  std::size_t tail = 0;
  if (!s.blocks.empty()) {
    const auto& [address, block] = *s.blocks.rbegin();
    if (block.second) tail = block.first;
  }
  const std::size_t pages = (bytes - tail + s.page - 1) / s.page;
  if (s.mapped + pages * s.page > s.reserved) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
  const CUdeviceptr first = s.base + s.mapped;
  std::vector<CUmemGenericAllocationHandle> made;
  CUresult r = CUDA_SUCCESS;
  for (std::size_t i = 0; i < pages && r == CUDA_SUCCESS; ++i) {
    CUmemGenericAllocationHandle h = 0;
    r = driver_.cuMemCreate(&h, s.page, &prop, 0);
    if (r != CUDA_SUCCESS) break;
    r = driver_.cuMemMap(first + i * s.page, s.page, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      driver_.cuMemRelease(h);
      break;
    }
    made.push_back(h);
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = driver_.cuMemSetAccess(first, pages * s.page, &access, 1);
  }
  if (r != CUDA_SUCCESS) {  // nothing of this growth stays
    for (std::size_t i = 0; i < made.size(); ++i) {
      driver_.cuMemUnmap(first + i * s.page, s.page);
      driver_.cuMemRelease(made[i]);
    }
    return r;
  }
  s.handles.insert(s.handles.end(), made.begin(), made.end());
  s.mapped += pages * s.page;
  pages_made_ += pages;
  reserved_ += pages * s.page;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  // The new pages join the free block at the end, or make one.
  CUdeviceptr start = first;
  std::size_t size = pages * s.page;
  if (tail != 0) {
    auto last = std::prev(s.blocks.end());
    start = last->first;
    size += tail;
    s.free.erase({tail, start});
  }
  s.blocks[start] = {size, true};
  s.free.insert({size, start});
  return CUDA_SUCCESS;
}

CUresult ExpandableSegments::allocate(CUdeviceptr* out, std::size_t bytes) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t size = round_up(bytes, kRound);
  Segment& s = bytes <= kSmallRequest ? small_ : large_;
  auto found = s.free.lower_bound({size, 0});
  if (found == s.free.end()) {
    if (CUresult r = grow(s, size); r != CUDA_SUCCESS) return r;
    found = s.free.lower_bound({size, 0});
  }
  const auto [block_size, p] = *found;
  s.free.erase(found);
  auto& block = s.blocks.at(p);
  if (block_size - size >= kRound) {
    s.blocks[p + size] = {block_size - size, true};
    s.free.insert({block_size - size, p + size});
    block.first = size;
  }
  block.second = false;
  *out = p;
  return CUDA_SUCCESS;
}

void ExpandableSegments::deallocate(CUdeviceptr p) {
  Segment& s = small_.base != 0 && p >= small_.base && p < small_.base + small_.reserved ? small_ : large_;
  auto it = s.blocks.find(p);
  if (it == s.blocks.end() || it->second.second) return;
  it->second.second = true;
  // Merge with the next block, then with the previous one, when free.
  if (auto next = std::next(it); next != s.blocks.end() && next->second.second) {
    s.free.erase({next->second.first, next->first});
    it->second.first += next->second.first;
    s.blocks.erase(next);
  }
  if (it != s.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->second.second) {
      s.free.erase({prev->second.first, prev->first});
      prev->second.first += it->second.first;
      s.blocks.erase(it);
      it = prev;
    }
  }
  s.free.insert({it->second.first, it->first});
}

}  // namespace uvmpool::bench
