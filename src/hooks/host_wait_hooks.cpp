// Hooks of the calls that may wait inside the driver for the device (tiering/host_wait_gate.h says
// what was measured): the module and library calls through which the CUDA runtime loads a kernel
// lazily before its first launch, the calls on a function that load it, and pinned host memory's
// allocation and free (the copies that may
// wait are in transfer_hooks.cpp, which also shows them to tiering). Each passes tiering's gate:
// while the mover holds the program's streams, the call waits outside the driver until the hold
// ends, since inside it would stop the mover's own driver calls. Handed out only while tiering
// watches launches (hands_out), like the launch hooks: with UVMPOOL_TIERING=off nothing moves, and
// these calls cost nothing extra.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"
#include "tiering/streams.h"
#include "tiering/tiering.h"

namespace uvmpool::hooks::impl {

#define UVMPOOL_GATED(symbol, params, args)                                 \
  CUresult CUDAAPI symbol params {                                          \
    stats::count_hook(driver::Fn::symbol);                                  \
    const driver::RealDriver* d = driver::real();                          \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE; \
    const tiering::HostWaitGate::Pass pass(tiering::StreamRegistry::process().host_waits()); \
    return d->table.symbol args;                                            \
  }

UVMPOOL_GATED(cuModuleLoadData, (CUmodule* module, const void* image), (module, image))
UVMPOOL_GATED(cuModuleLoadDataEx,
              (CUmodule* module, const void* image, unsigned n, CUjit_option* options, void** values),
              (module, image, n, options, values))
UVMPOOL_GATED(cuModuleGetFunction, (CUfunction* f, CUmodule module, const char* name), (f, module, name))
UVMPOOL_GATED(cuLibraryLoadData,
              (CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values, unsigned n_jit,
               CUlibraryOption* options, void** values, unsigned n),
              (library, code, jit_options, jit_values, n_jit, options, values, n))
UVMPOOL_GATED(cuLibraryGetKernel, (CUkernel* kernel, CUlibrary library, const char* name), (kernel, library, name))
UVMPOOL_GATED(cuKernelGetFunction, (CUfunction* f, CUkernel kernel), (f, kernel))

// Pinned host memory: freeing it (and, measured as a pair with it, allocating) waited inside the driver.
UVMPOOL_GATED(cuMemAllocHost_v2, (void** p, size_t bytes), (p, bytes))
UVMPOOL_GATED(cuMemHostAlloc, (void** p, size_t bytes, unsigned flags), (p, bytes, flags))
UVMPOOL_GATED(cuMemFreeHost, (void* p), (p))

#undef UVMPOOL_GATED

// The calls on a function that load it lazily, as its first launch does (measured for launches; these
// by analogy): its attributes (the runtime's cudaFuncGetAttributes / cudaFuncSetAttribute, which
// Triton's launcher and PyTorch's large-shared-memory kernels make once per kernel), its occupancy
// (cudaOccupancy*), its cache preference, and an explicit cuFuncLoad. They pass the gate only until the
// function is known to be loaded (Tiering::begin_loading_call), so a program that asks them before
// every launch waits at no hold once it has launched the function.
#define UVMPOOL_LOADING(symbol, handle, params, args)                                         \
  CUresult CUDAAPI symbol params {                                                              \
    stats::count_hook(driver::Fn::symbol);                                                      \
    const driver::RealDriver* d = driver::real();                                              \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE;                \
    tiering::Tiering* t = tiering::Tiering::existing();                                         \
    const tiering::ParamLayout* loading =                                                       \
        t != nullptr ? t->begin_loading_call(reinterpret_cast<CUfunction>(handle)) : nullptr;   \
    const CUresult r = d->table.symbol args;                                                    \
    if (t != nullptr) t->end_loading_call(loading, r);                                          \
    return r;                                                                                   \
  }

UVMPOOL_LOADING(cuFuncGetAttribute, f, (int* value, CUfunction_attribute attribute, CUfunction f),
                (value, attribute, f))
UVMPOOL_LOADING(cuFuncSetAttribute, f, (CUfunction f, CUfunction_attribute attribute, int value),
                (f, attribute, value))
UVMPOOL_LOADING(cuFuncSetCacheConfig, f, (CUfunction f, CUfunc_cache config), (f, config))
UVMPOOL_LOADING(cuFuncLoad, f, (CUfunction f), (f))
UVMPOOL_LOADING(cuKernelGetAttribute, kernel,
                (int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice device),
                (value, attribute, kernel, device))
UVMPOOL_LOADING(cuKernelSetAttribute, kernel,
                (CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice device),
                (attribute, value, kernel, device))
UVMPOOL_LOADING(cuOccupancyMaxActiveBlocksPerMultiprocessor, f,
                (int* blocks, CUfunction f, int block_size, size_t shared), (blocks, f, block_size, shared))
UVMPOOL_LOADING(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, f,
                (int* blocks, CUfunction f, int block_size, size_t shared, unsigned flags),
                (blocks, f, block_size, shared, flags))

#undef UVMPOOL_LOADING

}  // namespace uvmpool::hooks::impl
