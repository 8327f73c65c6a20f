// The cache of freed mappings (mapping_cache.h).
#include "pool/mapping_cache.h"

#include <algorithm>

#include "config/checks.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {

MappingCache::MappingCache() : bins_(std::make_unique<Bin[]>(kDirectBins + 1)) {}

void MappingCache::init(std::size_t chunk, bool counters) {
  chunk_ = chunk;
  counters_ = counters;
}

void MappingCache::put(Block* b, bool count_free) {
  if (b->granules < kDirectBins) {
    Bin& bin = bins_[b->granules];
    MutexLock lock(bin.mu);
    UVMPOOL_CHECK(!b->binned, "a mapping is in one bin at a time");
    b->prev = nullptr;
    b->next = bin.head;
    if (bin.head != nullptr) bin.head->prev = b;
    bin.head = b;
    if (bin.tail == nullptr) bin.tail = b;
    bin.add(1);
    b->binned = true;
    if (count_free) bump(bin.returned);
    return;
  }
  MutexLock lock(big_mu_);
  UVMPOOL_CHECK(!b->binned, "a mapping is in one bin at a time");
  big_bin_.emplace(b->granules, b);
  b->binned = true;
  if (count_free) bump(big_returned_);
}

Block* MappingCache::take(std::size_t granules) {
  Block* b = nullptr;
  if (granules < kDirectBins) {
    Bin& bin = bins_[granules];
    MutexLock lock(bin.mu);
    b = bin.head;  // the most recently freed: its pages are the likeliest to be in the TLB
    if (b == nullptr) return nullptr;
    bin.head = b->next;
    if (bin.head != nullptr) bin.head->prev = nullptr;
    if (bin.tail == b) bin.tail = nullptr;
    bin.add(-1);
    b->binned = false;
    bump(bin.taken);
  } else {
    MutexLock lock(big_mu_);
    auto it = big_bin_.find(granules);
    if (it == big_bin_.end()) return nullptr;
    b = it->second;
    big_bin_.erase(it);
    b->binned = false;
    bump(big_taken_[size_bucket(granules * chunk_)]);
  }
  UVMPOOL_CHECK(b->state.load(std::memory_order_acquire) == kCached && b->granules == granules,
                "a binned mapping is cached, of its bin's size");
  return b;
}

bool MappingCache::unbin(Block* b) {
  if (b->granules < kDirectBins) {
    Bin& bin = bins_[b->granules];
    MutexLock lock(bin.mu);
    if (!b->binned) return false;  // a fast-path allocation took it
    if (b->prev != nullptr) b->prev->next = b->next;
    if (b->next != nullptr) b->next->prev = b->prev;
    if (bin.head == b) bin.head = b->next;
    if (bin.tail == b) bin.tail = b->prev;
    b->prev = b->next = nullptr;
    bin.add(-1);
    b->binned = false;
    return true;
  }
  MutexLock lock(big_mu_);
  if (!b->binned) return false;
  auto [first, last] = big_bin_.equal_range(b->granules);
  const auto it = std::find_if(first, last, [b](const auto& kv) { return kv.second == b; });
  if (it == last) return false;
  big_bin_.erase(it);
  b->binned = false;
  return true;
}

std::vector<Block*> MappingCache::device_mappings() {
  std::vector<Block*> cached;
  for (std::size_t g = 1; g < kDirectBins; ++g) {
    Bin& bin = bins_[g];
    if (bin.count.load(std::memory_order_relaxed) == 0) continue;
    MutexLock lock(bin.mu);
    for (Block* b = bin.head; b != nullptr; b = b->next) cached.push_back(b);
  }
  MutexLock lock(big_mu_);
  for (const auto& [g, b] : big_bin_) cached.push_back(b);
  return cached;
}

Block* MappingCache::pop_least_recent(std::size_t granules) {
  Bin& bin = bins_[granules];
  MutexLock lock(bin.mu);
  Block* b = bin.tail;
  if (b == nullptr) return nullptr;
  bin.tail = b->prev;
  if (bin.tail != nullptr) bin.tail->next = nullptr;
  if (bin.head == b) bin.head = nullptr;
  b->prev = nullptr;
  bin.add(-1);
  b->binned = false;
  return b;
}

Block* MappingCache::pop_big(std::size_t need, bool smallest_covering) {
  MutexLock lock(big_mu_);
  if (big_bin_.empty()) return nullptr;
  auto it = smallest_covering ? big_bin_.lower_bound(need) : std::prev(big_bin_.end());
  if (it == big_bin_.end()) return nullptr;
  Block* b = it->second;
  big_bin_.erase(it);
  b->binned = false;
  return b;
}

Block* MappingCache::victim(std::size_t need) {
  Block* v = nullptr;
  for (std::size_t g = std::min(need, kDirectBins); g < kDirectBins && v == nullptr; ++g) v = pop_least_recent(g);
  if (v == nullptr) v = pop_big(need, true);
  if (v == nullptr) v = pop_big(need, false);
  for (std::size_t g = kDirectBins - 1; g > 0 && v == nullptr; --g) v = pop_least_recent(g);
  return v;
}

void MappingCache::put_with_host(Block* b) {
  MutexLock lock(spilled_mu_);
  [[maybe_unused]] const bool binned =
      (b->host_run() ? host_bin_ : spilled_bin_).emplace(std::pair{b->granules, b->base}, b).second;
  UVMPOOL_CHECK(binned, "a mapping with host pieces is binned once, at its own address");
}

Block* MappingCache::take_spilled(std::size_t granules) {
  MutexLock lock(spilled_mu_);
  auto it = spilled_bin_.lower_bound({granules, 0});
  if (it == spilled_bin_.end() || it->first.first != granules) return nullptr;
  Block* b = it->second;
  spilled_bin_.erase(it);
  return b;
}

Block* MappingCache::take_host_run(std::size_t at_least, bool largest) {
  MutexLock lock(spilled_mu_);
  if (host_bin_.empty()) return nullptr;
  // The largest: the lowest of the largest count.
  const std::size_t count = largest ? std::prev(host_bin_.end())->first.first : at_least;
  auto it = host_bin_.lower_bound({count, 0});
  if (it == host_bin_.end() || it->first.first < at_least) return nullptr;
  Block* b = it->second;
  host_bin_.erase(it);
  return b;
}

bool MappingCache::withdraw_with_host(Block* b) {
  MutexLock lock(spilled_mu_);
  auto& bin = b->host_run() ? host_bin_ : spilled_bin_;
  const auto it = bin.find({b->granules, b->base});
  if (it == bin.end() || it->second != b) return false;
  bin.erase(it);
  return true;
}

std::vector<Block*> MappingCache::take_spilled_all(bool only_with_device, bool host_runs, std::vector<Block*>* runs) {
  std::vector<Block*> taken;
  MutexLock lock(spilled_mu_);
  for (auto it = spilled_bin_.begin(); it != spilled_bin_.end();) {
    // Wholly in host memory (host extents: not a run) frees no device room.
    if (only_with_device && it->second->host_chunks == it->second->granules) {
      ++it;
      continue;
    }
    taken.push_back(it->second);
    it = spilled_bin_.erase(it);
  }
  if (host_runs) {
    for (const auto& [key, b] : host_bin_) runs->push_back(b);
    host_bin_.clear();
  }
  return taken;
}

void MappingCache::add_counts(DeviceStats& s) const {
  auto load = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.frees += load(big_returned_);
  for (int i = 0; i < kSizeBuckets; ++i) {
    s.allocations_by_size[i] += load(big_taken_[i]);
    s.cache_hits += load(big_taken_[i]);
  }
  for (std::size_t g = 1; g < kDirectBins; ++g) {
    const std::uint64_t taken = load(bins_[g].taken);
    s.allocations_by_size[size_bucket(g * chunk_)] += taken;
    s.cache_hits += taken;
    s.frees += load(bins_[g].returned);
  }
}

std::string MappingCache::check() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
  std::string out;
  for (std::size_t g = 0; g < kDirectBins; ++g) {
    Bin& bin = bins_[g];
    MutexLock bin_lock(bin.mu);
    std::size_t n = 0;
    for (const Block* b = bin.head; b != nullptr; b = b->next, ++n) {
      if (b->granules != g || b->state.load() != kCached || !b->binned) out += "bin " + std::to_string(g) + " holds a mapping it should not\n";
    }
    if (n != bin.count.load()) out += "bin " + std::to_string(g) + " counts " + std::to_string(bin.count.load()) + ", holds " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace uvmpool::pool
