// The public C API of include/uvmpool/uvmpool.h.
#include "uvmpool/uvmpool.h"

#include <algorithm>
#include <cstring>

#include "pool/pool.h"
#include "stats/counters.h"

#ifndef UVMPOOL_VERSION_STRING
#define UVMPOOL_VERSION_STRING "0.0.0"
#endif

extern "C" {

const char* uvmpool_version(void) { return UVMPOOL_VERSION_STRING; }

int uvmpool_get_stats(uvmpool_stats* out) {
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

unsigned long long uvmpool_hook_calls(const char* function) { return uvmpool::stats::hook_calls(function); }

}  // extern "C"
