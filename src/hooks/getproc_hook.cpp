// Route (b): cuGetProcAddress. The CUDA runtime (PyTorch, CuPy, JAX) resolves every driver function
// through it, so this is where most programs meet uvmpool. The driver answers first (its result
// codes and symbolFound stay exactly the driver's); where its answer is a function uvmpool hooks, the
// hook of the same variant is handed out instead.
#include <cstring>

#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"

namespace uvmpool::hooks {
namespace {

// The list entry the driver's answer stands for: the entry of that base name whose real pointer it
// is, else the entry the version/flags rule picks (for drivers that answer with internal pointers).
int entry_for_answer(const driver::RealDriver& d, const char* symbol, int version, cuuint64_t flags, void* answer) {
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i)
    if (d.table.raw()[i] == answer && std::strcmp(driver::kFunctions[i].base, symbol) == 0)
      return static_cast<int>(i);
  return driver::find_entry(symbol, version, flags);
}

CUresult resolve(const char* symbol, void** pfn, int version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* found) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const driver::RealDriver* d = driver::real();
  if (d == nullptr) return CUDA_ERROR_NO_DEVICE;
  // Each form goes to the same form of the driver: they answer "not found" differently (the 11.3
  // form with CUDA_ERROR_NOT_FOUND, the 12.0 form with CUDA_SUCCESS and a null pointer).
  const bool v1 = found == nullptr;
  CUresult r;
  if (v1 && d->table.cuGetProcAddress != nullptr)
    r = d->table.cuGetProcAddress(symbol, pfn, version, flags);
  else if (!v1 && d->table.cuGetProcAddress_v2 != nullptr)
    r = d->table.cuGetProcAddress_v2(symbol, pfn, version, flags, found);
  else
    return CUDA_ERROR_NOT_SUPPORTED;
  if (r != CUDA_SUCCESS || disabled() || *pfn == nullptr) return r;

  const int entry = entry_for_answer(*d, symbol, version, flags, *pfn);
  if (hands_out(entry)) {
    *pfn = hook_table().raw()[entry];
    stats::count_route(stats::Route::getproc);
  }
  return r;
}

}  // namespace

namespace impl {

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  stats::count_hook(driver::Fn::cuGetProcAddress);
  return resolve(symbol, pfn, version, flags, nullptr);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* found) {
  stats::count_hook(driver::Fn::cuGetProcAddress_v2);
  // symbolFound is optional in the 12.0 form; resolve() tells the forms apart by it.
  CUdriverProcAddressQueryResult ignored{};
  return resolve(symbol, pfn, version, flags, found != nullptr ? found : &ignored);
}

}  // namespace impl
}  // namespace uvmpool::hooks
