// The public C API of include/uvmpool/uvmpool.h.
#include "uvmpool/uvmpool.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "pool/pool.h"
#include "stats/collect.h"
#include "stats/counters.h"
#include "stats/format.h"
#include "tiering/advice.h"

#ifndef UVMPOOL_VERSION_STRING
#define UVMPOOL_VERSION_STRING "0.0.0"
#endif

// No C++ exception may cross the C API: each function catches at its boundary and answers its
// error value (-1, or 0 for the counts), as for a bad argument.
#define UVMPOOL_GUARD(failure) \
  catch (...) {                \
    return failure;            \
  }

namespace {

// The place a tier names for the allocation at `ptr` (its own device); nullopt for no tier or no pool memory.
std::optional<uvmpool::tiering::Place> place_for(unsigned long long ptr, int tier) {
  using uvmpool::pool::Tier;
  if (tier != UVMPOOL_TIER_DEVICE && tier != UVMPOOL_TIER_HOST) return std::nullopt;
  uvmpool::pool::Pool* pool = uvmpool::pool::Pool::existing();
  const std::optional<uvmpool::pool::AllocationInfo> a = pool != nullptr ? pool->find(ptr) : std::nullopt;
  if (!a) return std::nullopt;
  return uvmpool::tiering::Place{tier == UVMPOOL_TIER_HOST ? Tier::Host : Tier::Device, a->device};
}

// 0: it had an effect; 1: accepted without one; -1: refused (or not pool memory).
int answer(const std::optional<CUresult>& r, bool acted) {
  if (!r || *r != CUDA_SUCCESS) return -1;
  return acted ? 0 : 1;
}

}  // namespace

extern "C" {

const char* uvmpool_version(void) { return UVMPOOL_VERSION_STRING; }

int uvmpool_get_stats(uvmpool_stats* out) try {
  if (out == nullptr || out->struct_size < sizeof(unsigned long long)) return -1;
  const auto& c = uvmpool::stats::counters();
  uvmpool_stats s{};
  s.struct_size = sizeof(uvmpool_stats);
  s.allocations = c.allocations.load(std::memory_order_relaxed);
  s.frees = c.frees.load(std::memory_order_relaxed);
  s.bytes_allocated = c.bytes_allocated.load(std::memory_order_relaxed);
  s.resolved_via_dlsym = c.routes[0].load(std::memory_order_relaxed);
  s.resolved_via_getproc = c.routes[1].load(std::memory_order_relaxed);
  s.calls_via_export = c.routes[2].load(std::memory_order_relaxed);
  s.pool_allocations = c.pool_allocations.load(std::memory_order_relaxed);
  s.driver_allocations = c.driver_allocations.load(std::memory_order_relaxed);
  if (const uvmpool::pool::Pool* pool = uvmpool::pool::Pool::existing()) {
    for (int d = 0; d < pool->device_count(); ++d) {
      const uvmpool::pool::DeviceStats ds = pool->stats(d);
      s.pool_held_bytes += ds.chunks_held * ds.chunk_size;
      s.pool_live_bytes += ds.live_bytes;
      s.pool_peak_held_bytes += ds.peak_held_bytes;
      s.pool_peak_live_bytes += ds.peak_live_bytes;
      s.pool_live_host_bytes += ds.live_host_bytes;
      s.pool_host_held_bytes += ds.host_chunks_held * ds.chunk_size;
      s.pool_peak_host_held_bytes += ds.peak_host_held_bytes;
      s.pool_spilled_allocations += ds.spilled_allocations;
      s.pool_out_of_memory += ds.out_of_memory;
    }
  }
  // A caller built against an older, smaller struct gets the fields it knows of.
  const auto n = std::min<unsigned long long>(out->struct_size, sizeof(s));
  std::memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
}
UVMPOOL_GUARD(-1)

int uvmpool_get_device_stats(int device, uvmpool_device_stats* out) try {
  if (out == nullptr || out->struct_size < 2 * sizeof(unsigned long long)) return -1;
  uvmpool_device_stats s{};
  s.struct_size = sizeof(s);
  s.device = device;
  const uvmpool::pool::Pool* pool = uvmpool::pool::Pool::existing();
  const uvmpool::pool::DeviceStats ds = pool != nullptr ? pool->stats(device) : uvmpool::pool::DeviceStats{};
  const int result = ds.chunk_size == 0 ? 1 : 0;
  if (result == 0) {
    s.live_bytes = ds.live_bytes - std::min(ds.live_bytes, ds.live_host_bytes);
    s.peak_live_bytes = ds.peak_live_device_bytes;
    s.held_bytes = ds.held_bytes;
    s.peak_held_bytes = ds.peak_held_bytes;
    s.budget = ds.budget;
    s.host_live_bytes = ds.live_host_bytes;
    s.host_peak_live_bytes = ds.peak_live_host_bytes;
    s.host_held_bytes = ds.host_held_bytes;
    s.host_peak_held_bytes = ds.peak_host_held_bytes;
    s.host_limit = ds.host_limit;
    s.allocations = ds.allocations;
    s.frees = ds.frees;
    s.live_allocations = ds.live_allocations;
    s.stitched_maps = ds.stitched_maps;
    s.cache_hits = ds.cache_hits;
    s.spilled_allocations = ds.spilled_allocations;
    s.out_of_memory = ds.out_of_memory;
  }
  const auto n = std::min<unsigned long long>(out->struct_size, sizeof(s));
  std::memcpy(out, &s, n);
  out->struct_size = n;
  return result;
}
UVMPOOL_GUARD(-1)

unsigned long long uvmpool_stats_json(char* buf, unsigned long long size) try {
  const std::string json = uvmpool::stats::to_json(uvmpool::stats::collect_process());
  if (buf != nullptr && size != 0) {
    const std::size_t n = std::min<std::size_t>(json.size(), size - 1);
    std::memcpy(buf, json.data(), n);
    buf[n] = '\0';
  }
  return json.size();
}
UVMPOOL_GUARD(0)

unsigned long long uvmpool_hook_calls(const char* function) try {
  return uvmpool::stats::hook_calls(function);
}
UVMPOOL_GUARD(0)

int uvmpool_prefetch(unsigned long long ptr, unsigned long long bytes, int tier) try {
  const std::optional<uvmpool::tiering::Place> where = place_for(ptr, tier);
  if (!where) return -1;
  bool acted = false;
  const std::optional<CUresult> r = uvmpool::tiering::prefetch(ptr, bytes, where, 0, &acted);
  return answer(r, acted);
}
UVMPOOL_GUARD(-1)

int uvmpool_advise(unsigned long long ptr, unsigned long long bytes, int prefer) try {
  bool acted = false;
  std::optional<CUresult> r;
  if (prefer == -1) {
    r = uvmpool::tiering::advise(ptr, bytes, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, std::nullopt, &acted);
  } else {
    const std::optional<uvmpool::tiering::Place> where = place_for(ptr, prefer);
    if (!where) return -1;
    r = uvmpool::tiering::advise(ptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, where, &acted);
  }
  return answer(r, acted);
}
UVMPOOL_GUARD(-1)

}  // extern "C"
