// Hooks of the copies and memsets: the pool memory each reads or writes is shown to tiering as a
// launch's touches (Tiering::before_transfer), so the policy plans for it and an overlapped move
// whose memory a copy or memset writes meanwhile is dropped (src/tiering/mover.h), as for a kernel.
// The copies that may wait inside the driver for the device also pass the host-wait gate
// (host_wait_hooks.cpp says what was measured): the synchronous ones, and the asynchronous ones
// with a host side (pageable host memory makes them synchronous). Device-to-device asynchronous
// copies and the memsets never waited on the host in the measurement and are not gated. Strided
// copies (2D, 3D), peer copies and pitched memsets touch the span from their first byte to their
// last on each side (tiering/transfer_ranges.h); a batch of copies (flat or 3D) touches each of its copies. Handed
// out only while tiering watches launches (hands_out): with UVMPOOL_TIERING=off they cost nothing.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "hooks/shown.h"
#include "stats/counters.h"
#include "tiering/streams.h"
#include "tiering/tiering.h"
#include "tiering/transfer_ranges.h"

#include <algorithm>
#include <vector>

namespace uvmpool::hooks::impl {
namespace {

using tiering::Transfer;

// A per-thread variant's stream 0 is the calling thread's default stream.
CUstream per_thread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

tiering::HostWaitGate& gate() { return tiering::StreamRegistry::process().host_waits(); }

}  // namespace

// Counts the call, refuses it when `refused` (INVALID_VALUE), passes the gate when `gated` (before
// the showing: a call waiting at the gate is not under way), shows it to tiering (`stream`, `kind`,
// the tiering::TransferRanges `ranges`), and forwards it.
#define UVMPOOL_TRANSFER_CHECKED(symbol, params, args, refused, gated, kind, stream, ranges) \
  CUresult CUDAAPI symbol params {                                            \
    stats::count_hook(driver::Fn::symbol);                                    \
    const driver::RealDriver* d = driver::real();                            \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE; \
    if (refused) return CUDA_ERROR_INVALID_VALUE;                             \
    const tiering::HostWaitGate::Pass pass(gate(), gated);                    \
    const tiering::TransferRanges touched = ranges;                           \
    const Shown shown(Transfer::kind, stream, touched.span());                \
    return d->table.symbol args;                                              \
  }
// Any one whose touches are an expression of its arguments, `ranges`.
#define UVMPOOL_TRANSFER_OF(symbol, params, args, gated, kind, stream, ranges) \
  UVMPOOL_TRANSFER_CHECKED(symbol, params, args, false, gated, kind, stream, ranges)
// The flat ones: the ranges as given, {address, bytes} each.
#define UVMPOOL_TRANSFER(symbol, params, args, gated, kind, stream, ...) \
  UVMPOOL_TRANSFER_OF(symbol, params, args, gated, kind, stream, (tiering::flat_ranges(__VA_ARGS__)))
// The strided copies, whose descriptor is `c`: a null one is refused here, since driver 580 crashes
// on it in cuMemcpy3DPeer (the GPU suite's client_runtime_like, 2026-11-28) where cuMemcpy2D and
// cuMemcpy3D answer INVALID_VALUE; the simulator crashes alike.
#define UVMPOOL_STRIDED_COPY(symbol, params, args, gated, kind, stream, ranges) \
  UVMPOOL_TRANSFER_CHECKED(symbol, params, args, c == nullptr, gated, kind, stream, ranges)

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

// Copies between device memory and a CUDA array: synchronous, and only the device side can be the
// pool's (an array's storage is the driver's own).
UVMPOOL_TRANSFER(cuMemcpyDtoA_v2, (CUarray dst, size_t offset, CUdeviceptr src, size_t n), (dst, offset, src, n), true,
                 Copy, nullptr, {src, n})
UVMPOOL_TRANSFER(cuMemcpyDtoA_v2_ptds, (CUarray dst, size_t offset, CUdeviceptr src, size_t n), (dst, offset, src, n),
                 true, Copy, CU_STREAM_PER_THREAD, {src, n})
UVMPOOL_TRANSFER(cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t offset, size_t n), (dst, src, offset, n), true,
                 Copy, nullptr, {dst, n})
UVMPOOL_TRANSFER(cuMemcpyAtoD_v2_ptds, (CUdeviceptr dst, CUarray src, size_t offset, size_t n), (dst, src, offset, n),
                 true, Copy, CU_STREAM_PER_THREAD, {dst, n})

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
                 {p, tiering::bytes_of(n, 2)})
UVMPOOL_TRANSFER(cuMemsetD16_v2_ptds, (CUdeviceptr p, unsigned short v, size_t n), (p, v, n), false, Memset,
                 CU_STREAM_PER_THREAD, {p, tiering::bytes_of(n, 2)})
UVMPOOL_TRANSFER(cuMemsetD32_v2, (CUdeviceptr p, unsigned int v, size_t n), (p, v, n), false, Memset, nullptr,
                 {p, tiering::bytes_of(n, 4)})
UVMPOOL_TRANSFER(cuMemsetD32_v2_ptds, (CUdeviceptr p, unsigned int v, size_t n), (p, v, n), false, Memset,
                 CU_STREAM_PER_THREAD, {p, tiering::bytes_of(n, 4)})
UVMPOOL_TRANSFER(cuMemsetD8Async, (CUdeviceptr p, unsigned char v, size_t n, CUstream s), (p, v, n, s), false, Memset,
                 s, {p, n})
UVMPOOL_TRANSFER(cuMemsetD8Async_ptsz, (CUdeviceptr p, unsigned char v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, n})
UVMPOOL_TRANSFER(cuMemsetD16Async, (CUdeviceptr p, unsigned short v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, s, {p, tiering::bytes_of(n, 2)})
UVMPOOL_TRANSFER(cuMemsetD16Async_ptsz, (CUdeviceptr p, unsigned short v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, tiering::bytes_of(n, 2)})
UVMPOOL_TRANSFER(cuMemsetD32Async, (CUdeviceptr p, unsigned int v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, s, {p, tiering::bytes_of(n, 4)})
UVMPOOL_TRANSFER(cuMemsetD32Async_ptsz, (CUdeviceptr p, unsigned int v, size_t n, CUstream s), (p, v, n, s), false,
                 Memset, per_thread(s), {p, tiering::bytes_of(n, 4)})

// Strided copies: gated when synchronous, or when a side may be host memory.
UVMPOOL_STRIDED_COPY(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* c), (c), true, Copy, nullptr, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D* c), (c), true, Copy, CU_STREAM_PER_THREAD,
                    tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* c), (c), true, Copy, nullptr, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D* c), (c), true, Copy, CU_STREAM_PER_THREAD,
                    tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* c, CUstream s), (c, s), tiering::has_host_side(c), Copy,
                    s, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D* c, CUstream s), (c, s), tiering::has_host_side(c),
                    Copy, per_thread(s), tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* c), (c), true, Copy, nullptr, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D* c), (c), true, Copy, CU_STREAM_PER_THREAD,
                    tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* c, CUstream s), (c, s), tiering::has_host_side(c), Copy,
                    s, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D* c, CUstream s), (c, s), tiering::has_host_side(c),
                    Copy, per_thread(s), tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER* c), (c), true, Copy, nullptr, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER* c), (c), true, Copy, CU_STREAM_PER_THREAD,
                    tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER* c, CUstream s), (c, s), tiering::has_host_side(c),
                    Copy, s, tiering::ranges_of(c))
UVMPOOL_STRIDED_COPY(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER* c, CUstream s), (c, s),
                    tiering::has_host_side(c), Copy, per_thread(s), tiering::ranges_of(c))

// Peer copies: device memory on both sides; the synchronous ones gated.
UVMPOOL_TRANSFER(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
                 (dst, dc, src, sc, n), true, Copy, nullptr, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
                 (dst, dc, src, sc, n), true, Copy, CU_STREAM_PER_THREAD, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
                 (dst, dc, src, sc, n, s), false, Copy, s, {dst, n}, {src, n})
UVMPOOL_TRANSFER(cuMemcpyPeerAsync_ptsz,
                 (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
                 (dst, dc, src, sc, n, s), false, Copy, per_thread(s), {dst, n}, {src, n})

// Pitched memsets: `height` rows of `width` elements, `pitch` bytes apart. Not gated, as the memsets.
UVMPOOL_TRANSFER_OF(cuMemsetD2D8_v2, (CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, nullptr, tiering::pitched_range(p, pitch, w, 1, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D8_v2_ptds, (CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, CU_STREAM_PER_THREAD, tiering::pitched_range(p, pitch, w, 1, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D16_v2, (CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, nullptr, tiering::pitched_range(p, pitch, w, 2, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D16_v2_ptds, (CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, CU_STREAM_PER_THREAD, tiering::pitched_range(p, pitch, w, 2, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D32_v2, (CUdeviceptr p, size_t pitch, unsigned int v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, nullptr, tiering::pitched_range(p, pitch, w, 4, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D32_v2_ptds, (CUdeviceptr p, size_t pitch, unsigned int v, size_t w, size_t h),
                    (p, pitch, v, w, h), false, Memset, CU_STREAM_PER_THREAD, tiering::pitched_range(p, pitch, w, 4, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D8Async, (CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, s, tiering::pitched_range(p, pitch, w, 1, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D8Async_ptsz,
                    (CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, per_thread(s), tiering::pitched_range(p, pitch, w, 1, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D16Async,
                    (CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, s, tiering::pitched_range(p, pitch, w, 2, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D16Async_ptsz,
                    (CUdeviceptr p, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, per_thread(s), tiering::pitched_range(p, pitch, w, 2, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D32Async, (CUdeviceptr p, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, s, tiering::pitched_range(p, pitch, w, 4, h))
UVMPOOL_TRANSFER_OF(cuMemsetD2D32Async_ptsz,
                    (CUdeviceptr p, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),
                    (p, pitch, v, w, h, s), false, Memset, per_thread(s), tiering::pitched_range(p, pitch, w, 4, h))

#undef UVMPOOL_TRANSFER
#undef UVMPOOL_TRANSFER_OF

namespace {

// Room reserved up front for a batch's ranges: a count the driver will refuse (or that wraps 2 * count)
// must not make the hook throw or reserve the address space; longer batches grow as they are read.
constexpr size_t kReservedCopies = 4096;

// A batch of copies: each copy's two sides, any of which may be host memory (gated). Arrays the
// driver would read anyway; null ones give no range (the driver refuses them).
std::vector<tiering::TransferRange> batch_ranges(const CUdeviceptr* dsts, const CUdeviceptr* srcs,
                                                 const size_t* sizes, size_t count) {
  std::vector<tiering::TransferRange> out;
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr) return out;
  out.reserve(2 * std::min<size_t>(count, kReservedCopies));
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) continue;
    out.push_back({dsts[i], sizes[i]});
    out.push_back({srcs[i], sizes[i]});
  }
  return out;
}

// A batch of 3D copies: each copy's pointer operands (tiering/transfer_ranges.h), any of which may be
// host memory (gated). A null list gives no range (the driver refuses it).
std::vector<tiering::TransferRange> batch_ranges(const CUDA_MEMCPY3D_BATCH_OP* ops, size_t count) {
  std::vector<tiering::TransferRange> out;
  if (ops == nullptr) return out;
  out.reserve(2 * std::min<size_t>(count, kReservedCopies));
  for (size_t i = 0; i < count; ++i) {
    const tiering::TransferRanges ranges = tiering::ranges_of(ops[i]);  // named: span() points into it
    for (const tiering::TransferRange& r : ranges.span()) out.push_back(r);
  }
  return out;
}

template <typename Forward>
CUresult batch(CUstream stream, const std::vector<tiering::TransferRange>& ranges, Forward forward) {
  const tiering::HostWaitGate::Pass pass(gate());
  const Shown shown(Transfer::Copy, stream, ranges);
  return forward();
}

}  // namespace

// Counts the call, finds its ranges (`ranges`, from the call's arguments) and forwards it, gated.
#define UVMPOOL_BATCH(symbol, params, args, stream, ranges)                                   \
  CUresult CUDAAPI symbol params {                                                            \
    stats::count_hook(driver::Fn::symbol);                                                    \
    const driver::RealDriver* d = driver::real();                                            \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE;              \
    return batch(stream, ranges, [&] { return d->table.symbol args; });                      \
  }
UVMPOOL_BATCH(cuMemcpyBatchAsync,
              (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attr_indices, size_t attr_count, size_t* fail_index, CUstream s),
              (dsts, srcs, sizes, count, attrs, attr_indices, attr_count, fail_index, s), s,
              batch_ranges(dsts, srcs, sizes, count))
UVMPOOL_BATCH(cuMemcpyBatchAsync_ptsz,
              (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attr_indices, size_t attr_count, size_t* fail_index, CUstream s),
              (dsts, srcs, sizes, count, attrs, attr_indices, attr_count, fail_index, s), per_thread(s),
              batch_ranges(dsts, srcs, sizes, count))
UVMPOOL_BATCH(cuMemcpyBatchAsync_v2,
              (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attr_indices, size_t attr_count, CUstream s),
              (dsts, srcs, sizes, count, attrs, attr_indices, attr_count, s), s, batch_ranges(dsts, srcs, sizes, count))
UVMPOOL_BATCH(cuMemcpyBatchAsync_v2_ptsz,
              (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attr_indices, size_t attr_count, CUstream s),
              (dsts, srcs, sizes, count, attrs, attr_indices, attr_count, s), per_thread(s),
              batch_ranges(dsts, srcs, sizes, count))
UVMPOOL_BATCH(cuMemcpy3DBatchAsync,
              (size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_index, unsigned long long flags, CUstream s),
              (count, ops, fail_index, flags, s), s, batch_ranges(ops, count))
UVMPOOL_BATCH(cuMemcpy3DBatchAsync_ptsz,
              (size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_index, unsigned long long flags, CUstream s),
              (count, ops, fail_index, flags, s), per_thread(s), batch_ranges(ops, count))
UVMPOOL_BATCH(cuMemcpy3DBatchAsync_v2,
              (size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream s),
              (count, ops, flags, s), s, batch_ranges(ops, count))
UVMPOOL_BATCH(cuMemcpy3DBatchAsync_v2_ptsz,
              (size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream s), (count, ops, flags, s),
              per_thread(s), batch_ranges(ops, count))
#undef UVMPOOL_BATCH

}  // namespace uvmpool::hooks::impl
