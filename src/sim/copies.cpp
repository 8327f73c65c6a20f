// Copies and memsets, executed at submission (also the Async forms, on any stream). The device side
// must lie in mapped memory accessible from the device, otherwise the call returns
// CUDA_ERROR_INVALID_VALUE instead of faulting; a range may span adjacent mappings, as VMM allows.
// A pointer outside the device address space is host memory (UVA): allowed where the API takes host
// memory (cuMemcpy's unified pointers, the host side of HtoD/DtoH), refused as a device pointer.
#include <cstring>
#include <mutex>

#include "sim/address_space.h"
#include "sim/contexts.h"
#include "sim/entry_points.h"
#include "sim/streams_events.h"

namespace uvmpool::sim {
namespace {

enum class Side { Device, HostOrDevice };

// Caller holds the address space's lock (shared).
CUresult check_range(AddressSpace& space, std::uintptr_t p, std::size_t n, bool write, Side side) {
  if (p == 0 || p + n < p) return CUDA_ERROR_INVALID_VALUE;
  if (space.overlaps_arena(p, n)) return space.accessible(p, n, write) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return side == Side::Device ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// The context the work runs in: the stream's, or the current one for synchronous calls.
CUresult work_context(const CUstream* stream) {
  Context* context = nullptr;
  return stream != nullptr ? stream_context(*stream, &context) : current_context(&context);
}

CUresult copy(std::uintptr_t dst, Side dst_side, std::uintptr_t src, Side src_side, std::size_t n,
              const CUstream* stream) {
  if (CUresult status = work_context(stream); status != CUDA_SUCCESS) return status;
  if (n == 0) return CUDA_SUCCESS;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  if (CUresult status = check_range(space, dst, n, true, dst_side); status != CUDA_SUCCESS) return status;
  if (CUresult status = check_range(space, src, n, false, src_side); status != CUDA_SUCCESS) return status;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

template <typename T>
CUresult fill(CUdeviceptr dst, T value, std::size_t count, const CUstream* stream) {
  if (CUresult status = work_context(stream); status != CUDA_SUCCESS) return status;
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;  // D16/D32 need element alignment
  if (count == 0) return CUDA_SUCCESS;
  if (count > SIZE_MAX / sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  if (CUresult status = check_range(space, dst, count * sizeof(T), true, Side::Device); status != CUDA_SUCCESS)
    return status;
  T* out = reinterpret_cast<T*>(dst);
  if constexpr (sizeof(T) == 1) {
    std::memset(out, value, count);
  } else {
    for (std::size_t i = 0; i < count; ++i) out[i] = value;
  }
  return CUDA_SUCCESS;
}

std::uintptr_t host(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

constexpr Side kDev = Side::Device;
constexpr Side kAny = Side::HostOrDevice;

}  // namespace

CUresult impl::cuMemcpy(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kAny, src, kAny, n, nullptr);
}
CUresult impl::cuMemcpy_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kAny, src, kAny, n, nullptr);
}
CUresult impl::cuMemcpyHtoD_v2(CUdeviceptr_v2 dst, const void* src, size_t n) {
  return copy(dst, kDev, host(src), kAny, n, nullptr);
}
CUresult impl::cuMemcpyHtoD_v2_ptds(CUdeviceptr_v2 dst, const void* src, size_t n) {
  return copy(dst, kDev, host(src), kAny, n, nullptr);
}
CUresult impl::cuMemcpyDtoH_v2(void* dst, CUdeviceptr_v2 src, size_t n) {
  return copy(host(dst), kAny, src, kDev, n, nullptr);
}
CUresult impl::cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr_v2 src, size_t n) {
  return copy(host(dst), kAny, src, kDev, n, nullptr);
}
CUresult impl::cuMemcpyDtoD_v2(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kDev, src, kDev, n, nullptr);
}
CUresult impl::cuMemcpyDtoD_v2_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n) {
  return copy(dst, kDev, src, kDev, n, nullptr);
}
CUresult impl::cuMemcpyAsync(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kAny, src, kAny, n, &s);
}
CUresult impl::cuMemcpyAsync_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kAny, src, kAny, n, &s);
}
CUresult impl::cuMemcpyHtoDAsync_v2(CUdeviceptr_v2 dst, const void* src, size_t n, CUstream s) {
  return copy(dst, kDev, host(src), kAny, n, &s);
}
CUresult impl::cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_v2 dst, const void* src, size_t n, CUstream s) {
  return copy(dst, kDev, host(src), kAny, n, &s);
}
CUresult impl::cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(host(dst), kAny, src, kDev, n, &s);
}
CUresult impl::cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(host(dst), kAny, src, kDev, n, &s);
}
CUresult impl::cuMemcpyDtoDAsync_v2(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kDev, src, kDev, n, &s);
}
CUresult impl::cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t n, CUstream s) {
  return copy(dst, kDev, src, kDev, n, &s);
}
CUresult impl::cuMemsetD8_v2(CUdeviceptr_v2 dst, unsigned char v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD8_v2_ptds(CUdeviceptr_v2 dst, unsigned char v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD16_v2(CUdeviceptr_v2 dst, unsigned short v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD16_v2_ptds(CUdeviceptr_v2 dst, unsigned short v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD32_v2(CUdeviceptr_v2 dst, unsigned int v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD32_v2_ptds(CUdeviceptr_v2 dst, unsigned int v, size_t n) {
  return fill(dst, v, n, nullptr);
}
CUresult impl::cuMemsetD8Async(CUdeviceptr_v2 dst, unsigned char v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}
CUresult impl::cuMemsetD8Async_ptsz(CUdeviceptr_v2 dst, unsigned char v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}
CUresult impl::cuMemsetD16Async(CUdeviceptr_v2 dst, unsigned short v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}
CUresult impl::cuMemsetD16Async_ptsz(CUdeviceptr_v2 dst, unsigned short v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}
CUresult impl::cuMemsetD32Async(CUdeviceptr_v2 dst, unsigned int v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}
CUresult impl::cuMemsetD32Async_ptsz(CUdeviceptr_v2 dst, unsigned int v, size_t n, CUstream s) {
  return fill(dst, v, n, &s);
}

}  // namespace uvmpool::sim
