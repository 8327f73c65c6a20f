#include "pool/pool.h"
#include "stats/counters.h"

#include <cstring>

namespace uvmpool::stats {

Counters& counters() {
  // Never destroyed: hooks may run during exit, after static destructors.
  static Counters* c = new Counters;
  return *c;
}

std::uint64_t hook_calls(const char* function) {
  if (function == nullptr) return 0;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    const auto& f = driver::kFunctions[i];
    if (std::strcmp(f.symbol, function) == 0 || std::strcmp(f.base, function) == 0)
      total += counters().hook_calls[i].load(std::memory_order_relaxed);
  }
  return total;
}

void print_summary(std::FILE* out) {
  const Counters& c = counters();
  auto load = [](const std::atomic<std::uint64_t>& a) {
    return static_cast<unsigned long long>(a.load(std::memory_order_relaxed));
  };
  std::fprintf(out, "[uvmpool] summary: %llu allocations (%.1f MiB), %llu frees\n", load(c.allocations),
               static_cast<double>(load(c.bytes_allocated)) / (1 << 20), load(c.frees));
  std::fprintf(out, "[uvmpool]   hooks handed out: %llu via dlsym, %llu via cuGetProcAddress; %llu calls via exported symbols\n",
               load(c.routes[0]), load(c.routes[1]), load(c.routes[2]));
  std::fprintf(out, "[uvmpool]   served by the pool: %llu allocations; handed to the driver: %llu\n",
               load(c.pool_allocations), load(c.driver_allocations));
  if (const pool::Pool* p = pool::Pool::existing()) {
    for (int d = 0; d < p->device_count(); ++d) {
      const pool::DeviceStats s = p->stats(d);
      if (s.chunk_size == 0) continue;
      const double mib = static_cast<double>(s.chunk_size) / (1 << 20);
      std::fprintf(out,
                   "[uvmpool]   device %d: pool holds %.0f MiB (%llu chunks of %.0f MiB), peak held %.0f MiB, peak live %.0f MiB; "
                   "%llu mappings stitched, %llu cache hits, %llu taken apart, %llu refused (budget %.0f MiB)\n",
                   d, static_cast<double>(s.chunks_held) * mib, static_cast<unsigned long long>(s.chunks_held), mib,
                   static_cast<double>(s.peak_held_bytes) / (1 << 20), static_cast<double>(s.peak_live_bytes) / (1 << 20),
                   static_cast<unsigned long long>(s.stitched_maps), static_cast<unsigned long long>(s.cache_hits),
                   static_cast<unsigned long long>(s.mappings_broken), static_cast<unsigned long long>(s.out_of_memory),
                   static_cast<double>(s.budget) / (1 << 20));
      if (s.host_limit != 0 && (s.peak_host_held_bytes != 0 || s.external_host_bytes != 0)) {
        std::fprintf(out,
                     "[uvmpool]   device %d: spilled to host: %llu allocations, %.0f MiB live in host memory; "
                     "pinned %.0f MiB now (%.0f MiB ready: unmapped or premapped), peak %.0f MiB, limit %.0f MiB; "
                     "%llu chunks pinned inline; the program's own cuMemCreate in host memory %.0f MiB\n",
                     d, static_cast<unsigned long long>(s.spilled_allocations),
                     static_cast<double>(s.live_host_bytes) / (1 << 20), static_cast<double>(s.host_chunks_held) * mib,
                     static_cast<double>(s.host_chunks_reserve + s.host_chunks_premapped) * mib, static_cast<double>(s.peak_host_held_bytes) / (1 << 20),
                     static_cast<double>(s.host_limit) / (1 << 20),
                     static_cast<unsigned long long>(s.host_chunks_pinned_inline),
                     static_cast<double>(s.external_host_bytes) / (1 << 20));
      }
    }
  }
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i)
    if (const auto n = load(c.hook_calls[i]))
      std::fprintf(out, "[uvmpool]   %-28s %llu\n", driver::kFunctions[i].symbol, n);
}

}  // namespace uvmpool::stats
