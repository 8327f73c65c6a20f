#include "driver/driver_api.h"

namespace uvmpool::driver {

int find_entry(std::string_view base, int cuda_version, cuuint64_t flags) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best = -1;
  int best_per_thread = -1;
  for (std::size_t i = 0; i < kFunctionCount; ++i) {
    const FunctionInfo& f = kFunctions[i];
    if (base != f.base || f.version > cuda_version) continue;
    int& slot = f.flavor == Flavor::PerThread ? best_per_thread : best;
    if (slot < 0 || kFunctions[slot].version < f.version) slot = static_cast<int>(i);
  }
  return per_thread && best_per_thread >= 0 ? best_per_thread : best;
}

int find_symbol(std::string_view symbol) {
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    if (symbol == kFunctions[i].symbol) return static_cast<int>(i);
  return -1;
}

}  // namespace uvmpool::driver
