// The exported driver symbols, generated from the one list: each counts the call, applies an injected
// failure, refuses to run before cuInit where the real driver does, then calls its implementation.
#include <new>

#include "sim/devices.h"
#include "sim/entry_points.h"
#include "sim/fault_injection.h"

namespace uvmpool::sim {
namespace {

using driver::Fn;

// The calls the real driver answers before cuInit (cudart asks cuGetProcAddress for cuInit itself).
constexpr bool works_before_init(Fn fn) {
  switch (fn) {
    case Fn::cuInit:
    case Fn::cuDriverGetVersion:
    case Fn::cuGetErrorString:
    case Fn::cuGetErrorName:
    case Fn::cuGetProcAddress:
    case Fn::cuGetProcAddress_v2:
    case Fn::cuGetExportTable:
      return true;
    default:
      return false;
  }
}

template <typename Call>
CUresult dispatch(Fn fn, Call&& call) noexcept {
  if (CUresult injected = on_call(fn); injected != CUDA_SUCCESS) return injected;
  if (!works_before_init(fn) && !initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  // No C++ exception may cross the C ABI.
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

}  // namespace
}  // namespace uvmpool::sim

#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args)                          \
  extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI symbol params {            \
    return ::uvmpool::sim::dispatch(::uvmpool::driver::Fn::symbol,                              \
                                    [&]() { return ::uvmpool::sim::impl::symbol args; });       \
  }
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X

namespace uvmpool::sim {

void* export_address(int index) {
  static void* const kAddresses[] = {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) reinterpret_cast<void*>(&::symbol),
      UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
  };
  static_assert(sizeof(kAddresses) / sizeof(kAddresses[0]) == driver::kFunctionCount);
  if (index < 0 || static_cast<std::size_t>(index) >= driver::kFunctionCount) return nullptr;
  return kAddresses[index];
}

}  // namespace uvmpool::sim
