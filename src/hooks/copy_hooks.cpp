// Hooks of the copies that may wait on the host for queued work: the synchronous ones, and the
// asynchronous ones with a host side (pageable host memory makes them synchronous). Each passes
// tiering's gate (tiering/host_wait_gate.h): while the mover holds the program's streams, the call waits
// outside the driver until the hold ends, since inside it would stop the mover's own driver calls.
// Device-to-device asynchronous copies never wait on the host and are not hooked. Handed out only
// while tiering watches launches (hands_out), like the launch hooks: with UVMPOOL_TIERING=off nothing
// moves, and a copy costs nothing extra.
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

UVMPOOL_GATED(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
UVMPOOL_GATED(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
UVMPOOL_GATED(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
UVMPOOL_GATED(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s))
UVMPOOL_GATED(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s))
UVMPOOL_GATED(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
UVMPOOL_GATED(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))

#undef UVMPOOL_GATED

}  // namespace uvmpool::hooks::impl
