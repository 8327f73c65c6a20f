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
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i)
    if (const auto n = load(c.hook_calls[i]))
      std::fprintf(out, "[uvmpool]   %-28s %llu\n", driver::kFunctions[i].symbol, n);
}

}  // namespace uvmpool::stats
