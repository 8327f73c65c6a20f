#include "pool/address_map.h"

#include <sys/mman.h>

namespace uvmpool::pool {

AddressMap::~AddressMap() {
  for (int i = 0; i < count_.load(); ++i) {
    auto* e = regions_[i].entries.load();
    const std::size_t n = regions_[i].size.load() >> regions_[i].shift;
    if (e != nullptr) munmap(e, n * sizeof(std::atomic<Entry>));
    if (auto* h = regions_[i].host.load()) munmap(h, n);
  }
}

namespace {

// Anonymous memory: zero-filled, committed only where it is written.
void* zeroed(std::size_t bytes) {
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return mem == MAP_FAILED ? nullptr : mem;
}

}  // namespace

bool AddressMap::add_region(CUdeviceptr base, std::size_t size, unsigned shift) {
  MutexLock lock(add_mu_);
  const int i = count_.load(std::memory_order_relaxed);
  if (i >= kMaxRegions) return false;
  const std::size_t n = size >> shift;
  void* entries = zeroed(n * sizeof(std::atomic<Entry>));
  void* host = zeroed(n);
  if (entries == nullptr || host == nullptr) {
    if (entries != nullptr) munmap(entries, n * sizeof(std::atomic<Entry>));
    if (host != nullptr) munmap(host, n);
    return false;
  }
  Region& r = regions_[i];
  r.shift = shift;
  r.entries.store(static_cast<std::atomic<Entry>*>(entries), std::memory_order_relaxed);
  r.host.store(static_cast<std::atomic<std::uint8_t>*>(host), std::memory_order_relaxed);
  r.size.store(size, std::memory_order_relaxed);
  r.base.store(base, std::memory_order_relaxed);
  // Widening the span before publishing the region: a probe that sees the region sees it inside.
  if (base < low_.load(std::memory_order_relaxed)) low_.store(base, std::memory_order_relaxed);
  if (base + size > high_.load(std::memory_order_relaxed)) high_.store(base + size, std::memory_order_relaxed);
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
  if (entry == 0) set_host(p, bytes, false);
}

void AddressMap::set_host(CUdeviceptr p, std::size_t bytes, bool host) {
  const Region* r = find(p);
  if (r == nullptr) return;
  auto* marks = r->host.load(std::memory_order_relaxed);
  const std::size_t first = (p - r->base.load(std::memory_order_relaxed)) >> r->shift;
  const std::size_t count = bytes >> r->shift;
  std::int64_t changed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t was = marks[first + i].exchange(host ? 1 : 0, std::memory_order_relaxed);
    changed += static_cast<int>(host) - static_cast<int>(was);
  }
  if (changed != 0) host_granules_.fetch_add(static_cast<std::uint64_t>(changed), std::memory_order_relaxed);
}

AddressMap::Probe AddressMap::probe(CUdeviceptr p) const {
  if (p < low_.load(std::memory_order_relaxed) || p >= high_.load(std::memory_order_relaxed)) return {};
  const Region* r = find(p);
  if (r == nullptr) return {};
  const CUdeviceptr base = r->base.load(std::memory_order_relaxed);
  const std::size_t i = (p - base) >> r->shift;
  const Entry e = r->entries.load(std::memory_order_relaxed)[i].load(std::memory_order_acquire);
  if (e == 0) return {};
  return {e, r->host.load(std::memory_order_relaxed)[i].load(std::memory_order_relaxed) != 0,
          base + ((static_cast<CUdeviceptr>(i) + 1) << r->shift)};
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

std::optional<CUdeviceptr> RangeAllocator::take(std::size_t size, const Avoid& avoid) {
  auto it = by_size_.lower_bound({size, 0});
  if (it == by_size_.end()) return std::nullopt;
  if (avoid) {
    auto probe = it;
    for (int i = 0; i < kAvoidTries && probe != by_size_.end(); ++i, ++probe)
      if (!avoid(probe->second, size)) {
        it = probe;
        break;
      }
  }
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

bool RangeAllocator::take_at(CUdeviceptr base, std::size_t size) {
  auto it = by_address_.upper_bound(base);
  if (it == by_address_.begin()) return false;
  --it;
  const auto [start, have] = *it;
  if (base + size > start + have) return false;
  by_size_.erase({have, start});
  by_address_.erase(it);
  if (base > start) {
    by_address_[start] = base - start;
    by_size_.insert({base - start, start});
  }
  if (const CUdeviceptr end = base + size; end < start + have) {
    by_address_[end] = start + have - end;
    by_size_.insert({start + have - end, end});
  }
  return true;
}

std::optional<CUdeviceptr> RangeAllocator::free_ending_at(CUdeviceptr end) const {
  auto it = by_address_.lower_bound(end);
  if (it == by_address_.begin()) return std::nullopt;
  --it;
  if (it->first + it->second != end) return std::nullopt;
  return it->first;
}

std::size_t RangeAllocator::free_starting_at(CUdeviceptr start) const {
  auto it = by_address_.find(start);
  return it == by_address_.end() ? 0 : it->second;
}

std::uint64_t RangeAllocator::free_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [base, size] : by_address_) n += size;
  return n;
}

}  // namespace uvmpool::pool
