// Hooks of the copies and memsets: the pool memory each reads or writes is shown to tiering as a
// launch's touches (Tiering::before_transfer), so the policy plans for it and an overlapped move
// whose memory a copy or memset writes meanwhile is dropped (src/tiering/mover.h), as for a kernel.
// The copies that may wait inside the driver for the device also pass the host-wait gate
// (host_wait_hooks.cpp says what was measured): the synchronous ones, and the asynchronous ones
// with a host side (pageable host memory makes them synchronous). Device-to-device asynchronous
// copies and the memsets never waited on the host in the measurement and are not gated. Handed out
// only while tiering watches launches (hands_out): with UVMPOOL_TIERING=off they cost nothing.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "hooks/shown.h"
#include "stats/counters.h"
#include "tiering/streams.h"
#include "tiering/tiering.h"

namespace uvmpool::hooks::impl {
namespace {

using tiering::Transfer;

// A per-thread variant's stream 0 is the calling thread's default stream.
CUstream per_thread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

tiering::HostWaitGate& gate() { return tiering::StreamRegistry::process().host_waits(); }

}  // namespace

// Counts the call, shows it to tiering (`stream`, `kind`, the ranges), passes the gate when `gated`
// (before the showing: a call waiting at the gate is not under way), and forwards it.
#define UVMPOOL_TRANSFER(symbol, params, args, gated, kind, stream, ...)      \
  CUresult CUDAAPI symbol params {                                            \
    stats::count_hook(driver::Fn::symbol);                                    \
    const driver::RealDriver* d = driver::real();                            \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE; \
    const tiering::HostWaitGate::Pass pass(gate(), gated);                    \
    const Shown shown(Transfer::kind, stream, {__VA_ARGS__});                 \
    return d->table.symbol args;                                              \
  }

// Synchronous copies (the legacy default stream, or the thread's): gated.
UVMPOOL_TRANSFER(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy, nullptr,
                 {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy,
                 CU_STREAM_PER_THREAD, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n), true, Copy, nullptr,
                 {dst, n})
UVMPOOL_TRANSFER(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n), true, Copy,
                 CU_STREAM_PER_THREAD, {dst, n})
UVMPOOL_TRANSFER(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy, nullptr,
                 {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy,
                 CU_STREAM_PER_THREAD, {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy, nullptr,
                 {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), true, Copy,
                 CU_STREAM_PER_THREAD, {dst, n}, {src, n})

// Asynchronous copies: gated when a side may be the host's (cuMemcpyAsync takes either).
UVMPOOL_TRANSFER(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), true,
                 Copy, s, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
                 true, Copy, per_thread(s), {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s),
                 true, Copy, s, {dst, n})
UVMPOOL_TRANSFER(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream s),
                 (dst, src, n, s), true, Copy, per_thread(s), {dst, n})
UVMPOOL_TRANSFER(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), true,
                 Copy, s, {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
                 true, Copy, per_thread(s), {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
                 false, Copy, s, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
                 (dst, src, n, s), false, Copy, per_thread(s), {dst, n}, {src, n})

// Memsets: `n` elements of 1, 2 or 4 bytes. Not gated (the synchronous cuMemsetD8 did not wait
// behind a hold, measured).
UVMPOOL_TRANSFER(cuMemsetD8_v2, (CUdeviceptr p, unsigned char v, size_t n), (p, v, n), false, Memset, nullptr, {p, n})
UVMPOOL_TRANSFER(cuMemsetD8_v2_ptds, (CUdeviceptr p, unsigned char v, size_t n), (p, v, n), false, Memset,
                 CU_STREAM_PER_THREAD, {p, n})
UVMPOOL_TRANSFER(cuMemsetD16_v2, (CUdeviceptr p, unsigned short v, size_t n), (p, v, n), false, Memset, nullptr,
                 {p, 2 * n})
UVMPOOL_TRANSFER(cuMemsetD16_v2_ptds, (CUdeviceptr p, unsigned short v, size_t n), (p, v, n), false, Memset,
                 CU_STREAM_PER_THREAD, {p, 2 * n})
UVMPOOL_TRANSFER(cuMemsetD32_v2, (CUdeviceptr p, unsigned int v, size_t n), (p, v, n), false, Memset, nullptr,
                 {p, 4 * n})
UVMPOOL_TRANSFER(cuMemsetD32_v2_ptds, (CUdeviceptr p, unsigned int v, size_t n), (p, v, n), false, Memset,
                 CU_STREAM_PER_THREAD, {p, 4 * n})
UVMPOOL_TRANSFER(cuMemsetD8Async, (CUdeviceptr p, unsigned char v, size_t n, CUstream s), (p, v, n, s), false, Memset,
                 s, {p, n})
UVMPOOL_TRANSFER(cuMemsetD8Async_ptsz, (CUdeviceptr p, unsigned char v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, n})
UVMPOOL_TRANSFER(cuMemsetD16Async, (CUdeviceptr p, unsigned short v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, s, {p, 2 * n})
UVMPOOL_TRANSFER(cuMemsetD16Async_ptsz, (CUdeviceptr p, unsigned short v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, 2 * n})
UVMPOOL_TRANSFER(cuMemsetD32Async, (CUdeviceptr p, unsigned int v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, s, {p, 4 * n})
UVMPOOL_TRANSFER(cuMemsetD32Async_ptsz, (CUdeviceptr p, unsigned int v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, 4 * n})

#undef UVMPOOL_TRANSFER

}  // namespace uvmpool::hooks::impl
