#include "tiering/advice.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "config/log.h"
#include "driver/real_driver.h"
#include "tiering/tiering.h"

namespace uvmpool::tiering {
namespace {

// The live pool allocations covering [p, end) in order, without a gap; empty when a byte lies in none.
// The walk is as long as the range has allocations, as the driver's own walk of a managed range is:
// a range of any length the driver would take is taken.
std::vector<pool::AllocationInfo> covering(const pool::Pool& pool, CUdeviceptr p, CUdeviceptr end) {
  std::vector<pool::AllocationInfo> found;
  for (CUdeviceptr at = p; at < end;) {
    const std::optional<pool::AllocationInfo> info = pool.find(at);
    if (!info) return {};
    found.push_back(*info);
    at = info->base + std::max<std::size_t>(info->size, 1);
  }
  return found;
}

// The checks both calls share: a range of pool memory, a place that exists. CUDA_SUCCESS: go on.
CUresult check(int devices, CUdeviceptr p, std::size_t bytes, const std::optional<Place>& where, bool needs_place) {
  if (bytes == 0 || p + bytes < p) return CUDA_ERROR_INVALID_VALUE;
  if (!needs_place) return CUDA_SUCCESS;
  if (!where) return CUDA_ERROR_INVALID_VALUE;
  if (where->tier == pool::Tier::Device && (where->device < 0 || where->device >= devices))
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

int process_devices() {
  const driver::RealDriver* real = driver::real();
  int count = 0;
  if (real == nullptr || real->table.cuDeviceGetCount == nullptr || real->table.cuDeviceGetCount(&count) != CUDA_SUCCESS)
    return 0;
  return count;
}

}  // namespace

std::optional<Place> place_of(const CUmemLocation& where) {
  switch (where.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return Place{pool::Tier::Device, where.id};
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return Place{pool::Tier::Host, -1};
    default: return std::nullopt;
  }
}

Place place_of(CUdevice device) {
  return device == CU_DEVICE_CPU ? Place{pool::Tier::Host, -1} : Place{pool::Tier::Device, device};
}

std::optional<CUresult> advise(pool::Pool& pool, Tiering* tiering, int devices, CUdeviceptr p, std::size_t bytes,
                               CUmem_advise advice, std::optional<Place> where, bool* acted) {
  if (acted != nullptr) *acted = false;
  if (!pool.in_pool_space(p)) return std::nullopt;
  bool needs_place = false;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: break;  // the location is ignored, as by the driver
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: needs_place = true; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (const CUresult r = check(devices, p, bytes, where, needs_place); r != CUDA_SUCCESS) return r;
  const std::vector<pool::AllocationInfo> allocations = covering(pool, p, p + bytes);
  if (allocations.empty()) {
    log::debug("cuMemAdvise on {:#x} + {}: not all of it is live pool memory", p, bytes);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (tiering == nullptr) return CUDA_SUCCESS;  // tiering is off: nothing reads advice
  std::optional<Preference> preference;
  if (advice == CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION) preference = Preference::None;
  if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION) preference = where->tier == pool::Tier::Host ? Preference::Host : Preference::Device;
  tiering->advise(allocations, preference, where ? where->device : -1);
  if (acted != nullptr) *acted = preference.has_value();
  return CUDA_SUCCESS;
}

namespace {
// A prefetch of pool memory checked, not asked yet: the allocations it covers, or why it is refused.
struct CheckedPrefetch {
  CUdeviceptr p = 0;
  std::size_t bytes = 0;
  Place where{};
  std::vector<pool::AllocationInfo> allocations;
};
CUresult check_prefetch(const pool::Pool& pool, int devices, CUdeviceptr p, std::size_t bytes,
                        const std::optional<Place>& where, CheckedPrefetch* out) {
  if (const CUresult r = check(devices, p, bytes, where, true); r != CUDA_SUCCESS) return r;
  out->allocations = covering(pool, p, p + bytes);
  if (out->allocations.empty()) {
    log::debug("cuMemPrefetchAsync on {:#x} + {}: not all of it is live pool memory", p, bytes);
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->p = p;
  out->bytes = bytes;
  out->where = *where;
  return CUDA_SUCCESS;
}
// Asks tiering for a checked prefetch; whether it was asked (tiering is on).
bool ask(Tiering* tiering, const CheckedPrefetch& c) {
  return tiering != nullptr && tiering->prefetch(c.allocations, c.p, c.p + c.bytes, c.where);
}
}  // namespace

std::optional<CUresult> prefetch(pool::Pool& pool, Tiering* tiering, int devices, CUdeviceptr p, std::size_t bytes,
                                 std::optional<Place> where, unsigned flags, bool* acted) {
  if (acted != nullptr) *acted = false;
  if (!pool.in_pool_space(p)) return std::nullopt;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // the driver defines none yet
  CheckedPrefetch checked;
  if (const CUresult r = check_prefetch(pool, devices, p, bytes, where, &checked); r != CUDA_SUCCESS) return r;
  const bool asked = ask(tiering, checked);
  if (acted != nullptr) *acted = asked;
  return CUDA_SUCCESS;
}

std::optional<CUresult> prefetch_batch(pool::Pool& pool, Tiering* tiering, int devices, const CUdeviceptr* ptrs,
                                       const std::size_t* sizes, std::size_t count, const CUmemLocation* locations,
                                       const std::size_t* loc_first, std::size_t loc_count, unsigned long long flags,
                                       const BatchForward& forward) {
  if (ptrs == nullptr || sizes == nullptr || locations == nullptr || loc_first == nullptr || count == 0 ||
      loc_count == 0 || loc_count > count || loc_first[0] != 0 || flags != 0)
    return std::nullopt;
  for (std::size_t k = 1; k < loc_count; ++k)
    if (loc_first[k] <= loc_first[k - 1] || loc_first[k] >= count) return std::nullopt;
  // Each range's location; which ranges are the driver's; the pool's checked. A refused batch moves
  // nothing: every pool range is checked before the driver is given its part, and asked only after.
  std::vector<CUdeviceptr> foreign_ptrs;
  std::vector<std::size_t> foreign_sizes, foreign_first;
  std::vector<CUmemLocation> foreign_locations;
  std::vector<CheckedPrefetch> ours;
  for (std::size_t j = 0, k = 0; j < count; ++j) {
    while (k + 1 < loc_count && loc_first[k + 1] <= j) ++k;
    if (pool.in_pool_space(ptrs[j])) {
      CheckedPrefetch& c = ours.emplace_back();
      if (const CUresult r = check_prefetch(pool, devices, ptrs[j], sizes[j], place_of(locations[k]), &c); r != CUDA_SUCCESS)
        return r;
      continue;
    }
    const bool same = !foreign_locations.empty() && std::memcmp(&foreign_locations.back(), &locations[k],
                                                                sizeof(CUmemLocation)) == 0;
    if (!same) {
      foreign_first.push_back(foreign_ptrs.size());
      foreign_locations.push_back(locations[k]);
    }
    foreign_ptrs.push_back(ptrs[j]);
    foreign_sizes.push_back(sizes[j]);
  }
  if (ours.empty()) return std::nullopt;
  if (!foreign_ptrs.empty())
    if (const CUresult r = forward(foreign_ptrs, foreign_sizes, foreign_locations, foreign_first); r != CUDA_SUCCESS)
      return r;
  for (const CheckedPrefetch& c : ours) ask(tiering, c);
  return CUDA_SUCCESS;
}

std::optional<CUresult> advise(CUdeviceptr p, std::size_t bytes, CUmem_advise advice, std::optional<Place> where,
                               bool* acted) {
  if (acted != nullptr) *acted = false;
  pool::Pool* pool = pool::Pool::existing();
  if (pool == nullptr) return std::nullopt;
  return advise(*pool, Tiering::process(), process_devices(), p, bytes, advice, where, acted);
}

std::optional<CUresult> prefetch(CUdeviceptr p, std::size_t bytes, std::optional<Place> where, unsigned flags,
                                 bool* acted) {
  if (acted != nullptr) *acted = false;
  pool::Pool* pool = pool::Pool::existing();
  if (pool == nullptr) return std::nullopt;
  return prefetch(*pool, Tiering::process(), process_devices(), p, bytes, where, flags, acted);
}

std::optional<CUresult> prefetch_batch(const CUdeviceptr* ptrs, const std::size_t* sizes, std::size_t count,
                                       const CUmemLocation* locations, const std::size_t* loc_first,
                                       std::size_t loc_count, unsigned long long flags, const BatchForward& forward) {
  pool::Pool* pool = pool::Pool::existing();
  if (pool == nullptr) return std::nullopt;
  return prefetch_batch(*pool, Tiering::process(), process_devices(), ptrs, sizes, count, locations, loc_first,
                        loc_count, flags, forward);
}

void AdviceTable::prefer(const pool::AllocationInfo& allocation, Preference preference) {
  MutexLock lock(mu_);
  if (preference == Preference::None) {
    entries_.erase(allocation.base);
    return;
  }
  entries_[allocation.base] = {allocation.buffer_id, preference};
  any_.store(true, std::memory_order_release);
}

Preference AdviceTable::preference(const pool::AllocationInfo& allocation) const {
  if (!any_.load(std::memory_order_acquire)) return Preference::None;
  MutexLock lock(mu_);
  const auto it = entries_.find(allocation.base);
  return it != entries_.end() && it->second.buffer_id == allocation.buffer_id ? it->second.preference
                                                                              : Preference::None;
}

Preference AdviceTable::shared(std::span<const pool::AllocationInfo> allocations) const {
  if (!any() || allocations.empty()) return Preference::None;
  bool all_host = true;
  for (const pool::AllocationInfo& a : allocations) {
    const Preference p = preference(a);
    if (p == Preference::Device) return Preference::Device;
    all_host = all_host && p == Preference::Host;
  }
  return all_host ? Preference::Host : Preference::None;
}

}  // namespace uvmpool::tiering
