// Hooks of the calls that may wait inside the driver for the device (tiering/host_wait_gate.h says
// what was measured): the module and library calls through which the CUDA runtime loads a kernel
// lazily before its first launch, and pinned host memory's allocation and free (the copies that may
// wait are in transfer_hooks.cpp, which also shows them to tiering). Each passes tiering's gate:
// while the mover holds the program's streams, the call waits outside the driver until the hold
// ends, since inside it would stop the mover's own driver calls. Handed out only while tiering
// watches launches (hands_out), like the launch hooks: with UVMPOOL_TIERING=off nothing moves, and
// these calls cost nothing extra.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"
#include "tiering/streams.h"

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

}  // namespace uvmpool::hooks::impl
