// Hooks of the allocation calls: count, hand to the backend, return its answer.
#include "driver/real_driver.h"
#include "hooks/backend.h"
#include "hooks/hooks.h"
#include "tiering/streams.h"
#include "stats/counters.h"

namespace uvmpool::hooks::impl {
namespace {

using driver::Fn;

// A stream passed to a per-thread-default-stream (_ptsz) variant: 0 there means the per-thread stream.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

CUresult counted_allocation(CUresult result, size_t bytes) {
  if (result == CUDA_SUCCESS) stats::count_allocation(bytes);
  return result;
}

// The hooks are uvmpool's front door: a missing output pointer is answered here, as the driver
// documents it, instead of being handed on (some driver versions dereference it and crash).
constexpr CUresult kInvalid = CUDA_ERROR_INVALID_VALUE;

CUresult counted_free(CUresult result) {
  if (result == CUDA_SUCCESS) stats::count_free();
  return result;
}

}  // namespace

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  stats::count_hook(Fn::cuMemAlloc_v2);
  if (dptr == nullptr) return kInvalid;
  return counted_allocation(backend().alloc(dptr, bytes), bytes);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                    unsigned int element_bytes) {
  stats::count_hook(Fn::cuMemAllocPitch_v2);
  if (dptr == nullptr || pitch == nullptr) return kInvalid;
  const CUresult r = backend().alloc_pitch(dptr, pitch, width, height, element_bytes);
  return counted_allocation(r, r == CUDA_SUCCESS && pitch ? *pitch * height : 0);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr ptr) {
  stats::count_hook(Fn::cuMemFree_v2);
  return counted_free(backend().free(ptr));
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  stats::count_hook(Fn::cuMemGetInfo_v2);
  if (free_bytes == nullptr || total_bytes == nullptr) return kInvalid;
  return backend().get_info(free_bytes, total_bytes);
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  stats::count_hook(Fn::cuMemGetAddressRange_v2);
  return backend().address_range(base, size, ptr);
}

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  stats::count_hook(Fn::cuPointerGetAttribute);
  if (data == nullptr) return kInvalid;
  return backend().pointer_attribute(data, attribute, ptr);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                        CUdeviceptr ptr) {
  stats::count_hook(Fn::cuPointerGetAttributes);
  if (count > 0 && (attributes == nullptr || data == nullptr)) return kInvalid;
  return backend().pointer_attributes(count, attributes, data, ptr);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  stats::count_hook(Fn::cuMemAllocAsync);
  if (dptr == nullptr) return kInvalid;
  return counted_allocation(backend().alloc_async(dptr, bytes, stream), bytes);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  stats::count_hook(Fn::cuMemAllocAsync_ptsz);
  if (dptr == nullptr) return kInvalid;
  return counted_allocation(backend().alloc_async(dptr, bytes, per_thread(stream)), bytes);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  stats::count_hook(Fn::cuMemAllocFromPoolAsync);
  if (dptr == nullptr || pool == nullptr) return kInvalid;
  return counted_allocation(backend().alloc_from_pool_async(dptr, bytes, pool, stream), bytes);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                              CUstream stream) {
  stats::count_hook(Fn::cuMemAllocFromPoolAsync_ptsz);
  if (dptr == nullptr || pool == nullptr) return kInvalid;
  return counted_allocation(backend().alloc_from_pool_async(dptr, bytes, pool, per_thread(stream)), bytes);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  stats::count_hook(Fn::cuMemFreeAsync);
  return counted_free(backend().free_async(ptr, stream));
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  stats::count_hook(Fn::cuMemFreeAsync_ptsz);
  return counted_free(backend().free_async(ptr, per_thread(stream)));
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  stats::count_hook(Fn::cuMemCreate);
  if (handle == nullptr || prop == nullptr) return kInvalid;
  return counted_allocation(backend().create(handle, size, prop, flags), size);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream stream) {
  stats::count_hook(Fn::cuStreamDestroy_v2);
  // Off the mover's list first (once destroyed, the handle may name another stream), its queued work
  // covered by an event the mover waits for.
  if (watches_launches()) {
    const driver::RealDriver* real = driver::real();
    tiering::StreamRegistry::process().destroying(stream, real != nullptr ? &real->table : nullptr);
  }
  return backend().stream_destroy(stream);
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  stats::count_hook(Fn::cuCtxEnablePeerAccess);
  return backend().peer_access(peer, flags, true);
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  stats::count_hook(Fn::cuCtxDisablePeerAccess);
  return backend().peer_access(peer, 0, false);
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  stats::count_hook(Fn::cuMemRelease);
  return counted_free(backend().release(handle));
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  stats::count_hook(Fn::cuMemMap);
  return backend().map(ptr, size, offset, handle, flags);
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  stats::count_hook(Fn::cuMemUnmap);
  return backend().unmap(ptr, size);
}

}  // namespace uvmpool::hooks::impl
