// The exported driver symbols, generated from the one list: each counts the call, applies an injected
// failure, refuses to run before cuInit where the real driver does, waits while another thread's copy
// keeps the driver to itself (timeline::submit_and_wait), charges the call's cost to the
// calling thread's clock, runs queued work that can now go, answers a context's sticky error, then
// calls its implementation.
#include <new>

#include "sim/clock.h"
#include "sim/contexts.h"
#include "sim/devices.h"
#include "sim/entry_points.h"
#include "sim/fault_injection.h"
#include "sim/timeline.h"

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

// The calls that ask about devices, or read or switch the calling thread's current context.
constexpr bool asks_devices_or_current_context(Fn fn) {
  switch (fn) {
    case Fn::cuDeviceGet:
    case Fn::cuDeviceGetCount:
    case Fn::cuDeviceGetName:
    case Fn::cuDeviceGetUuid:
    case Fn::cuDeviceGetUuid_v2:
    case Fn::cuDeviceTotalMem_v2:
    case Fn::cuDeviceGetAttribute:
    case Fn::cuCtxGetCurrent:
    case Fn::cuCtxSetCurrent:
    case Fn::cuCtxPushCurrent_v2:
    case Fn::cuCtxPopCurrent_v2:
    case Fn::cuCtxGetDevice:
      return true;
    default:
      return false;
  }
}

// The calls that still work in a context a fault has made unusable: those that inspect, switch or
// tear down contexts, and those that need none.
constexpr bool works_after_fault(Fn fn) {
  if (works_before_init(fn) || asks_devices_or_current_context(fn)) return true;
  switch (fn) {
    case Fn::cuDevicePrimaryCtxRetain:
    case Fn::cuDevicePrimaryCtxRelease_v2:
    case Fn::cuDevicePrimaryCtxReset_v2:
    case Fn::cuDevicePrimaryCtxSetFlags_v2:
    case Fn::cuDevicePrimaryCtxGetState:
    case Fn::cuCtxCreate_v2:
    case Fn::cuCtxCreate_v3:
    case Fn::cuCtxCreate_v4:
    case Fn::cuCtxDestroy_v2:
    // Virtual memory management needs no context (NCCL calls it without one).
    case Fn::cuMemAddressReserve:
    case Fn::cuMemAddressFree:
    case Fn::cuMemCreate:
    case Fn::cuMemRelease:
    case Fn::cuMemMap:
    case Fn::cuMemUnmap:
    case Fn::cuMemSetAccess:
    case Fn::cuMemGetAccess:
    case Fn::cuMemGetAllocationGranularity:
    case Fn::cuMemRetainAllocationHandle:
    case Fn::cuMemGetAllocationPropertiesFromHandle:
      return true;
    default:
      return false;
  }
}

// The calls that another thread's copy, waiting inside the driver behind an unwritten value, does not
// keep out (timeline::submit_and_wait): measured on an H100, cuEventSynchronize; by best belief, the
// other synchronizing and querying calls (the program's own synchronizes did not keep the mover out),
// and those that only read or switch the calling thread's context or ask about devices.
constexpr bool passes_the_door(Fn fn) {
  if (works_before_init(fn) || asks_devices_or_current_context(fn)) return true;
  switch (fn) {
    case Fn::cuCtxSynchronize:
    case Fn::cuStreamSynchronize:
    case Fn::cuStreamSynchronize_ptsz:
    case Fn::cuStreamQuery:
    case Fn::cuStreamQuery_ptsz:
    case Fn::cuStreamGetCtx:
    case Fn::cuEventQuery:
    case Fn::cuEventSynchronize:
      return true;
    default:
      return false;
  }
}

CUresult sticky_error(Fn fn) {
  if (works_after_fault(fn)) return CUDA_SUCCESS;
  Context* context = nullptr;
  if (current_context(&context) != CUDA_SUCCESS) return CUDA_SUCCESS;
  return context->sticky.load(std::memory_order_acquire);
}

template <typename Call>
CUresult dispatch(Fn fn, Call&& call) noexcept {
  // Before anything that may take a lock: the child of an initialized process has only its own thread.
  if (forked_after_init() && (fn == Fn::cuInit || !works_before_init(fn))) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult injected = on_call(fn); injected != CUDA_SUCCESS) return injected;
  if (!works_before_init(fn) && !initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  // The call's own modeled time: its base cost, what it charges for its work, its waits (not the
  // jumps to the horizon that other threads' waits cause meanwhile).
  const bool timed = initialized();
  const std::uint64_t began = timed ? clock::spent() : 0;
  if (initialized()) {
    if (!passes_the_door(fn))
      if (CUresult kept_out = timeline::wait_at_the_door(); kept_out != CUDA_SUCCESS) return kept_out;
    clock::charge(clock::base_cost(fn));
    timeline::pump();
    if (CUresult sticky = sticky_error(fn); sticky != CUDA_SUCCESS) return sticky;
  }
  CUresult result = CUDA_ERROR_UNKNOWN;
  // No C++ exception may cross the C ABI.
  try {
    result = call();
  } catch (const std::bad_alloc&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {  // result stays CUDA_ERROR_UNKNOWN
  }
  if (timed) on_return(fn, clock::spent() - began);
  return result;
}

}  // namespace
}  // namespace uvmpool::sim

// A C program may pass any integer where the prototype says enum (misuse tests do, on purpose), and the
// implementations refuse what is out of range; loading such a parameter is no error here, so UBSan's
// enum check is off for this one copy of the arguments.
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args)                                      \
  extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI symbol params {                        \
    return ::uvmpool::sim::dispatch(                                                                        \
        ::uvmpool::driver::Fn::symbol,                                                                      \
        [&]() __attribute__((no_sanitize("enum"))) { return ::uvmpool::sim::impl::symbol args; });          \
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
