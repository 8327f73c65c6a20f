#include "pool/external_handles.h"

namespace uvmpool::pool {

std::optional<ExternalHandles::Counted> ExternalHandles::created(Handle handle, const Counted& counted) {
  MutexLock lock(mu_);
  std::optional<Counted> stale;
  // The driver gives a value again only once its handle's references have all gone: the last release
  // is on its way here from another thread (releasing, released).
  if (auto it = by_handle_.find(handle); it != by_handle_.end()) {
    const std::uint64_t old = it->second;
    entries_.at(old).references = 0;
    by_handle_.erase(it);
    stale = end_if_unused(old);
  }
  const std::uint64_t id = next_id_++;
  entries_.emplace(id, Entry{counted, handle, 1, 0});
  by_handle_[handle] = id;
  return stale;
}

void ExternalHandles::retained(Handle handle, CUdeviceptr at) {
  MutexLock lock(mu_);
  std::optional<std::uint64_t> id;
  // The mapping at `at` names the memory even when its handle's references had all gone.
  if (auto it = mappings_.upper_bound(at); it != mappings_.begin()) {
    --it;
    if (at < it->first + it->second.size) id = it->second.entry;
  }
  if (!id) {
    const auto h = by_handle_.find(handle);
    if (h == by_handle_.end()) return;  // not a handle the pool counts
    id = h->second;
  }
  Entry& e = entries_.at(*id);
  if (e.references == 0) {
    e.handle = handle;
    by_handle_[handle] = *id;
  }
  ++e.references;
}

std::uint64_t ExternalHandles::releasing(Handle handle) const {
  MutexLock lock(mu_);
  const auto h = by_handle_.find(handle);
  return h != by_handle_.end() ? h->second : 0;
}

std::optional<ExternalHandles::Counted> ExternalHandles::released(std::uint64_t memory) {
  MutexLock lock(mu_);
  const auto it = entries_.find(memory);
  // Gone, or its references all taken already: a new handle got its value first (created).
  if (it == entries_.end() || it->second.references == 0) return std::nullopt;
  Entry& e = it->second;
  if (--e.references == 0) {
    if (const auto h = by_handle_.find(e.handle); h != by_handle_.end() && h->second == memory) by_handle_.erase(h);
  }
  return end_if_unused(memory);
}

std::optional<ExternalHandles::Counted> ExternalHandles::mapped(CUdeviceptr va, std::size_t size, Handle handle) {
  MutexLock lock(mu_);
  const auto h = by_handle_.find(handle);
  if (h == by_handle_.end()) return std::nullopt;
  ++entries_.at(h->second).mappings;
  const auto [at, fresh] = mappings_.try_emplace(va, Mapping{size, h->second});
  if (fresh) return std::nullopt;
  // The driver maps only where nothing is: the mapping here was unmapped unseen (not through the hooks).
  const std::uint64_t old = at->second.entry;
  at->second = Mapping{size, h->second};
  --entries_.at(old).mappings;
  return end_if_unused(old);
}

std::vector<ExternalHandles::Counted> ExternalHandles::unmapped(CUdeviceptr va, std::size_t size) {
  MutexLock lock(mu_);
  std::vector<Counted> ended;
  // The driver unmaps whole mappings only: those that begin inside the range.
  for (auto it = mappings_.lower_bound(va); it != mappings_.end() && it->first - va < size;) {
    const std::uint64_t id = it->second.entry;
    it = mappings_.erase(it);
    --entries_.at(id).mappings;
    if (auto c = end_if_unused(id)) ended.push_back(*c);
  }
  return ended;
}

std::optional<ExternalHandles::Counted> ExternalHandles::find(Handle handle) const {
  MutexLock lock(mu_);
  const auto h = by_handle_.find(handle);
  if (h == by_handle_.end()) return std::nullopt;
  return entries_.at(h->second).counted;
}

std::size_t ExternalHandles::live() const {
  MutexLock lock(mu_);
  return entries_.size();
}

std::size_t ExternalHandles::mappings() const {
  MutexLock lock(mu_);
  return mappings_.size();
}

std::optional<ExternalHandles::Counted> ExternalHandles::end_if_unused(std::uint64_t id) {
  const auto it = entries_.find(id);
  if (it == entries_.end() || it->second.references != 0 || it->second.mappings != 0) return std::nullopt;
  Counted c = it->second.counted;
  entries_.erase(it);
  return c;
}

}  // namespace uvmpool::pool
