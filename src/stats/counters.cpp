#include "stats/counters.h"

#include <cstring>
#include <new>

namespace uvmpool::stats {

Counters& counters() {
  // Never destroyed (hooks may run during exit, after static destructors) and never allocated: the
  // exported symbols and the dlsym hook count before the exception boundary (guarded_hooks.cpp), so
  // making the counters must not be able to throw.
  alignas(Counters) static unsigned char storage[sizeof(Counters)];
  static Counters* c = new (storage) Counters;
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
