#include "pool/address_map.h"

#include <sys/mman.h>

namespace uvmpool::pool {

AddressMap::~AddressMap() {
  for (int i = 0; i < count_.load(); ++i) {
    auto* e = regions_[i].entries.load();
    const std::size_t n = regions_[i].size.load() >> regions_[i].shift;
    if (e != nullptr) munmap(e, n * sizeof(std::atomic<Entry>));
  }
}

bool AddressMap::add_region(CUdeviceptr base, std::size_t size, unsigned shift) {
  const int i = count_.load(std::memory_order_relaxed);
  if (i >= kMaxRegions) return false;
  const std::size_t n = size >> shift;
  // Anonymous memory: zero-filled, committed only where entries are written.
  void* mem = mmap(nullptr, n * sizeof(std::atomic<Entry>), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  Region& r = regions_[i];
  r.shift = shift;
  r.entries.store(static_cast<std::atomic<Entry>*>(mem), std::memory_order_relaxed);
  r.size.store(size, std::memory_order_relaxed);
  r.base.store(base, std::memory_order_relaxed);
  count_.store(i + 1, std::memory_order_release);  // publishes the region to lock-free lookups
  return true;
}

const AddressMap::Region* AddressMap::find(CUdeviceptr p) const {
  const int n = count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const Region& r = regions_[i];
    const CUdeviceptr base = r.base.load(std::memory_order_relaxed);
    if (p >= base && p - base < r.size.load(std::memory_order_relaxed)) return &r;
  }
  return nullptr;
}

void AddressMap::set(CUdeviceptr p, std::size_t bytes, Entry entry) {
  const Region* r = find(p);
  if (r == nullptr) return;
  const CUdeviceptr base = r->base.load(std::memory_order_relaxed);
  auto* entries = r->entries.load(std::memory_order_relaxed);
  const std::size_t first = (p - base) >> r->shift;
  const std::size_t count = bytes >> r->shift;
  for (std::size_t i = 0; i < count; ++i) entries[first + i].store(entry, std::memory_order_release);
}

Entry AddressMap::lookup(CUdeviceptr p) const {
  const Region* r = find(p);
  if (r == nullptr) return 0;
  const CUdeviceptr base = r->base.load(std::memory_order_relaxed);
  return r->entries.load(std::memory_order_relaxed)[(p - base) >> r->shift].load(std::memory_order_acquire);
}

bool AddressMap::contains(CUdeviceptr p) const { return find(p) != nullptr; }

void RangeAllocator::add(CUdeviceptr base, std::size_t size) {
  region_starts_.insert(base);
  give_back(base, size);
}

std::optional<CUdeviceptr> RangeAllocator::take(std::size_t size) {
  auto it = by_size_.lower_bound({size, 0});
  if (it == by_size_.end()) return std::nullopt;
  const auto [have, base] = *it;
  by_size_.erase(it);
  by_address_.erase(base);
  if (have > size) {
    by_address_[base + size] = have - size;
    by_size_.insert({have - size, base + size});
  }
  return base;
}

void RangeAllocator::give_back(CUdeviceptr base, std::size_t size) {
  if (size == 0) return;
  // Coalesce with the free neighbours so large ranges stay available, within one region.
  auto next = by_address_.lower_bound(base);
  if (next != by_address_.end() && base + size == next->first && !starts_region(next->first)) {
    size += next->second;
    by_size_.erase({next->second, next->first});
    next = by_address_.erase(next);
  }
  if (next != by_address_.begin() && !starts_region(base)) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base) {
      by_size_.erase({prev->second, prev->first});
      base = prev->first;
      size += prev->second;
      by_address_.erase(prev);
    }
  }
  by_address_[base] = size;
  by_size_.insert({size, base});
}

}  // namespace uvmpool::pool
