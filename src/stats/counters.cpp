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

}  // namespace uvmpool::stats
