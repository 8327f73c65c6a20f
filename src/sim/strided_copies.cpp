// The strided and grouped copies and the pitched memsets: cuMemcpy2D/3D (and Unaligned, Async), the
// peer copies (cuMemcpyPeer, cuMemcpy3DPeer), the batched copies (cuMemcpyBatchAsync,
// cuMemcpy3DBatchAsync) and cuMemsetD2D*. Each is rows of a flat copy or memset (copy_work.h), with
// the real driver's checks of its arguments where the simulator can make them. The simulator has no CUDA arrays: a side of
// type CU_MEMORYTYPE_ARRAY is refused (CUDA_ERROR_NOT_SUPPORTED). All devices share one address
// space here, so a peer copy is a device-to-device copy once both contexts are known.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "sim/contexts.h"
#include "sim/copy_work.h"
#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

constexpr Submission kSync{nullptr, false};
constexpr Submission kSyncPerThread{nullptr, true};
Submission on(const CUstream& s) { return {&s, false}; }
Submission on_per_thread(const CUstream& s) { return {&s, true}; }

// One side of a 2D or 3D copy: its memory type names which pointer counts, and its first byte is at
// (z * slice_height + y) * pitch + x from it.
struct SideSpec {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  std::size_t x, y, z, pitch, slice_height;
};

CUresult rows_of(const SideSpec& s, Rows* out) {
  switch (s.type) {
    case CU_MEMORYTYPE_HOST:
      out->base = reinterpret_cast<std::uintptr_t>(s.host);
      out->side = Side::HostOrDevice;
      break;
    case CU_MEMORYTYPE_DEVICE:
      out->base = s.device;
      out->side = Side::Device;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      out->base = s.device;
      out->side = Side::HostOrDevice;
      break;
    case CU_MEMORYTYPE_ARRAY:
      return CUDA_ERROR_NOT_SUPPORTED;  // no arrays in the simulator
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::size_t row = 0, offset = 0, base = 0;
  if (__builtin_mul_overflow(s.z, s.slice_height, &row) || __builtin_add_overflow(row, s.y, &row) ||
      __builtin_mul_overflow(row, s.pitch, &offset) || __builtin_add_overflow(offset, s.x, &offset) ||
      __builtin_add_overflow(out->base, offset, &base) || out->base == 0)
    return CUDA_ERROR_INVALID_VALUE;
  out->base = base;
  out->pitch = s.pitch;
  if (__builtin_mul_overflow(s.pitch, s.slice_height, &out->slice)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// The checks both 2D and 3D copies share: rows narrower than their pitch when there are several, and
// (3D) slices of at least Height rows when there are several.
CUresult copy_sides(const SideSpec& dst, const SideSpec& src, Extent e, Submission how, const char* call) {
  for (const SideSpec* s : {&dst, &src}) {
    if (e.height > 1 && s->pitch < e.width) return CUDA_ERROR_INVALID_VALUE;
    if (e.depth > 1 && s->slice_height < e.height) return CUDA_ERROR_INVALID_VALUE;
  }
  Rows to, from;
  if (CUresult r = rows_of(dst, &to); r != CUDA_SUCCESS) return r;
  if (CUresult r = rows_of(src, &from); r != CUDA_SUCCESS) return r;
  return copy_rows(to, from, e, how, call);
}

CUresult copy_2d(const CUDA_MEMCPY2D* c, Submission how, const char* call) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return copy_sides({c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0},
                    {c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0},
                    {c->WidthInBytes, c->Height, 1}, how, call);
}


// A peer copy names the context of each side (the sim keeps one address space for all devices).
CUresult known(CUcontext dst, CUcontext src) {
  return from_handle(dst) != nullptr && from_handle(src) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER* c, Submission how, const char* call) {
  if (c == nullptr) {
    // Driver 580.159.04 crashes (SIGSEGV) in cuMemcpy3DPeer given a null descriptor, where
    // cuMemcpy2D and cuMemcpy3D answer INVALID_VALUE (the GPU suite's client_runtime_like,
    // 2026-11-28, docs/gpu-results.md); its other forms are taken to do the same. So does this
    // driver, so that a caller passing one on is found here.
    std::fprintf(stderr, "uvmpool-sim: %s(NULL): the real driver crashes on a null descriptor here\n", call);
    std::abort();
  }
  if (c->srcLOD != 0 || c->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  // A side's context is ignored when the side is an array.
  if ((c->dstMemoryType != CU_MEMORYTYPE_ARRAY && from_handle(c->dstContext) == nullptr) ||
      (c->srcMemoryType != CU_MEMORYTYPE_ARRAY && from_handle(c->srcContext) == nullptr))
    return CUDA_ERROR_INVALID_CONTEXT;
  return copy_sides(
      {c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, c->dstHeight},
      {c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight},
      {c->WidthInBytes, c->Height, c->Depth}, how, call);
}

CUresult copy_peer(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context, std::size_t n,
                   Submission how, const char* call) {
  if (CUresult r = known(dst_context, src_context); r != CUDA_SUCCESS) return r;
  return copy_rows({dst, Side::Device}, {src, Side::Device}, {n}, how, call);
}

// cuMemcpyBatchAsync: `count` flat copies on one stream (never the legacy default stream), each side
// of them host or device memory; the attributes must cover the batch from its first copy on, in
// order. On a failure *fail_index names the copy (SIZE_MAX: the batch's own arguments); the copies
// before it stay queued, as the driver leaves them.
CUresult copy_batch(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                    CUmemcpyAttributes* attrs, std::size_t* attr_indices, std::size_t attr_count,
                    std::size_t* fail_index, CUstream stream, bool per_thread, const char* call) {
  if (fail_index != nullptr) *fail_index = SIZE_MAX;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attr_indices == nullptr || attr_count == 0 || attr_count > count || attr_indices[0] != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 1; i < attr_count; ++i)
    if (attr_indices[i] <= attr_indices[i - 1] || attr_indices[i] >= count) return CUDA_ERROR_INVALID_VALUE;
  if (!per_thread && (stream == nullptr || stream == CU_STREAM_LEGACY)) return CUDA_ERROR_INVALID_VALUE;
  const Submission how{&stream, per_thread};
  for (std::size_t i = 0; i < count; ++i) {
    if (CUresult r = copy_rows({dsts[i], Side::HostOrDevice}, {srcs[i], Side::HostOrDevice}, {sizes[i]}, how, call);
        r != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

// cuMemcpy3DBatchAsync: `count` 3D copies between pointer operands on one stream (never the legacy
// default stream); an element is a byte between two pointers, a row `rowLength` of them (the width
// when 0), a layer `layerHeight` rows (the height when 0). Array operands are refused
// (CUDA_ERROR_NOT_SUPPORTED, no arrays here); flags must be 0, as the driver defines none. On a
// failure *fail_index names the copy, as for cuMemcpyBatchAsync.
CUresult pointer_side(const CUmemcpy3DOperand& o, const CUextent3D& e, SideSpec* out) {
  if (o.type == CU_MEMCPY_OPERAND_TYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
  if (o.type != CU_MEMCPY_OPERAND_TYPE_POINTER) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t row = o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : e.width;
  const std::size_t layer = o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : e.height;
  if (row < e.width || layer < e.height) return CUDA_ERROR_INVALID_VALUE;
  *out = {CU_MEMORYTYPE_UNIFIED, nullptr, o.op.ptr.ptr, 0, 0, 0, row, layer};
  return CUDA_SUCCESS;
}

CUresult copy_batch_3d(std::size_t count, const CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_index,
                       unsigned long long flags, CUstream stream, bool per_thread, const char* call) {
  if (fail_index != nullptr) *fail_index = SIZE_MAX;
  if (count == 0 || ops == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!per_thread && (stream == nullptr || stream == CU_STREAM_LEGACY)) return CUDA_ERROR_INVALID_VALUE;
  const Submission how{&stream, per_thread};
  for (std::size_t i = 0; i < count; ++i) {
    const CUDA_MEMCPY3D_BATCH_OP& op = ops[i];
    SideSpec dst{}, src{};
    CUresult r = op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0 ? CUDA_ERROR_INVALID_VALUE
                                                                                           : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) r = pointer_side(op.dst, op.extent, &dst);
    if (r == CUDA_SUCCESS) r = pointer_side(op.src, op.extent, &src);
    if (r == CUDA_SUCCESS) r = copy_sides(dst, src, {op.extent.width, op.extent.height, op.extent.depth}, how, call);
    if (r != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult copy_3d(const CUDA_MEMCPY3D* c, Submission how, const char* call) {
  if (c == nullptr || c->reserved0 != nullptr || c->reserved1 != nullptr || c->srcLOD != 0 || c->dstLOD != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return copy_sides(
      {c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, c->dstHeight},
      {c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight},
      {c->WidthInBytes, c->Height, c->Depth}, how, call);
}

CUresult impl::cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return copy_2d(c, kSync, "cuMemcpy2D_v2"); }
CUresult impl::cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) { return copy_2d(c, kSyncPerThread, "cuMemcpy2D_v2_ptds"); }
CUresult impl::cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) { return copy_2d(c, kSync, "cuMemcpy2DUnaligned_v2"); }
CUresult impl::cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) {
  return copy_2d(c, kSyncPerThread, "cuMemcpy2DUnaligned_v2_ptds");
}
CUresult impl::cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) { return copy_2d(c, on(s), "cuMemcpy2DAsync_v2"); }
CUresult impl::cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream s) {
  return copy_2d(c, on_per_thread(s), "cuMemcpy2DAsync_v2_ptsz");
}
CUresult impl::cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) { return copy_3d(c, kSync, "cuMemcpy3D_v2"); }
CUresult impl::cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* c) { return copy_3d(c, kSyncPerThread, "cuMemcpy3D_v2_ptds"); }
CUresult impl::cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) { return copy_3d(c, on(s), "cuMemcpy3DAsync_v2"); }
CUresult impl::cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* c, CUstream s) {
  return copy_3d(c, on_per_thread(s), "cuMemcpy3DAsync_v2_ptsz");
}
CUresult impl::cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* c) { return copy_3d_peer(c, kSync, "cuMemcpy3DPeer"); }
CUresult impl::cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* c) {
  return copy_3d_peer(c, kSyncPerThread, "cuMemcpy3DPeer_ptds");
}
CUresult impl::cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* c, CUstream s) {
  return copy_3d_peer(c, on(s), "cuMemcpy3DPeerAsync");
}
CUresult impl::cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* c, CUstream s) {
  return copy_3d_peer(c, on_per_thread(s), "cuMemcpy3DPeerAsync_ptsz");
}
CUresult impl::cuMemcpyPeer(CUdeviceptr_v2 dst, CUcontext dc, CUdeviceptr_v2 src, CUcontext sc, size_t n) {
  return copy_peer(dst, dc, src, sc, n, kSync, "cuMemcpyPeer");
}
CUresult impl::cuMemcpyPeer_ptds(CUdeviceptr_v2 dst, CUcontext dc, CUdeviceptr_v2 src, CUcontext sc, size_t n) {
  return copy_peer(dst, dc, src, sc, n, kSyncPerThread, "cuMemcpyPeer_ptds");
}
CUresult impl::cuMemcpyPeerAsync(CUdeviceptr_v2 dst, CUcontext dc, CUdeviceptr_v2 src, CUcontext sc, size_t n,
                                 CUstream s) {
  return copy_peer(dst, dc, src, sc, n, on(s), "cuMemcpyPeerAsync");
}
CUresult impl::cuMemcpyPeerAsync_ptsz(CUdeviceptr_v2 dst, CUcontext dc, CUdeviceptr_v2 src, CUcontext sc, size_t n,
                                      CUstream s) {
  return copy_peer(dst, dc, src, sc, n, on_per_thread(s), "cuMemcpyPeerAsync_ptsz");
}
CUresult impl::cuMemcpyBatchAsync(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                  CUmemcpyAttributes_v1* attrs, size_t* attr_indices, size_t attr_count,
                                  size_t* fail_index, CUstream s) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attr_indices, attr_count, fail_index, s, false,
                    "cuMemcpyBatchAsync");
}
CUresult impl::cuMemcpyBatchAsync_ptsz(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes_v1* attrs, size_t* attr_indices, size_t attr_count,
                                       size_t* fail_index, CUstream s) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attr_indices, attr_count, fail_index, s, true,
                    "cuMemcpyBatchAsync_ptsz");
}
CUresult impl::cuMemcpyBatchAsync_v2(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                     CUmemcpyAttributes_v1* attrs, size_t* attr_indices, size_t attr_count, CUstream s) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attr_indices, attr_count, nullptr, s, false,
                    "cuMemcpyBatchAsync_v2");
}
CUresult impl::cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                          CUmemcpyAttributes_v1* attrs, size_t* attr_indices, size_t attr_count,
                                          CUstream s) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attr_indices, attr_count, nullptr, s, true,
                    "cuMemcpyBatchAsync_v2_ptsz");
}

CUresult impl::cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP_v1* ops, size_t* fail_index,
                                    unsigned long long flags, CUstream s) {
  return copy_batch_3d(count, ops, fail_index, flags, s, false, "cuMemcpy3DBatchAsync");
}
CUresult impl::cuMemcpy3DBatchAsync_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP_v1* ops, size_t* fail_index,
                                         unsigned long long flags, CUstream s) {
  return copy_batch_3d(count, ops, fail_index, flags, s, true, "cuMemcpy3DBatchAsync_ptsz");
}
CUresult impl::cuMemcpy3DBatchAsync_v2(size_t count, CUDA_MEMCPY3D_BATCH_OP_v1* ops, unsigned long long flags,
                                       CUstream s) {
  return copy_batch_3d(count, ops, nullptr, flags, s, false, "cuMemcpy3DBatchAsync_v2");
}
CUresult impl::cuMemcpy3DBatchAsync_v2_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP_v1* ops, unsigned long long flags,
                                            CUstream s) {
  return copy_batch_3d(count, ops, nullptr, flags, s, true, "cuMemcpy3DBatchAsync_v2_ptsz");
}

// Pitched memsets: `height` rows of `width` elements, `pitch` bytes apart.
#define UVMPOOL_SIM_MEMSET_2D(symbol, type, how)                                                      \
  CUresult impl::symbol(CUdeviceptr_v2 dst, size_t pitch, type v, size_t width, size_t height) {     \
    return fill_rows(dst, pitch, v, sizeof(type), width, height, how, #symbol);                      \
  }
#define UVMPOOL_SIM_MEMSET_2D_ASYNC(symbol, type, per_thread)                                          \
  CUresult impl::symbol(CUdeviceptr_v2 dst, size_t pitch, type v, size_t width, size_t height, CUstream s) { \
    return fill_rows(dst, pitch, v, sizeof(type), width, height, {&s, per_thread}, #symbol);          \
  }
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D8_v2, unsigned char, kSync)
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D8_v2_ptds, unsigned char, kSyncPerThread)
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D16_v2, unsigned short, kSync)
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D16_v2_ptds, unsigned short, kSyncPerThread)
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D32_v2, unsigned int, kSync)
UVMPOOL_SIM_MEMSET_2D(cuMemsetD2D32_v2_ptds, unsigned int, kSyncPerThread)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D8Async, unsigned char, false)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, true)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D16Async, unsigned short, false)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, true)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D32Async, unsigned int, false)
UVMPOOL_SIM_MEMSET_2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, true)
#undef UVMPOOL_SIM_MEMSET_2D
#undef UVMPOOL_SIM_MEMSET_2D_ASYNC

}  // namespace uvmpool::sim
