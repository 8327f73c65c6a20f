// CUDA arrays (arrays.h): cuArrayCreate_v2 and cuArrayDestroy.
#include "sim/arrays.h"

#include <mutex>
#include <unordered_map>

#include "sim/address_space.h"
#include "sim/clock.h"
#include "sim/contexts.h"
#include "sim/entry_points.h"
#include "sim/settings.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

struct Array {
  Context* context = nullptr;
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
};

// The live arrays by handle (the handle is the storage's address, unique while it lives).
std::mutex g_mutex;
std::unordered_map<CUarray, Array>& arrays() {
  static auto* live = new std::unordered_map<CUarray, Array>();  // never destroyed: calls may come during exit
  return *live;
}

// Bytes of one element of `format`; 0 for a format the simulator does not model.
std::size_t element_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

}  // namespace

CUresult impl::cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR_v2* desc) {
  if (handle == nullptr || desc == nullptr || desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
  if (desc->NumChannels != 1 && desc->NumChannels != 2 && desc->NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t element = element_bytes(desc->Format);
  if (element == 0) return CUDA_ERROR_NOT_SUPPORTED;  // a real format, but not simulated
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(desc->Width, desc->Height == 0 ? 1 : desc->Height, &bytes) ||
      __builtin_mul_overflow(bytes, element * desc->NumChannels, &bytes))
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  AddressSpace& space = AddressSpace::get();
  std::uintptr_t base = 0;
  {
    std::unique_lock lock(space.mutex);
    if (!context->active.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (CUresult status = space.allocate_mapped(MemoryKind::Device, context, context->device, bytes, page_size(), &base);
        status != CUDA_SUCCESS)
      return status;
  }
  const auto h = reinterpret_cast<CUarray>(base);
  std::lock_guard lock(g_mutex);
  arrays()[h] = Array{context, base, bytes};
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult impl::cuArrayDestroy(CUarray handle) {
  Array a;
  {
    std::lock_guard lock(g_mutex);
    auto it = arrays().find(handle);
    if (it == arrays().end()) return CUDA_ERROR_INVALID_HANDLE;
    a = it->second;
    arrays().erase(it);
  }
  if (!a.context->active.load(std::memory_order_acquire)) return CUDA_SUCCESS;  // freed with its context
  // As cuMemFree: the device's work ends first, so the storage never goes under it.
  clock::wait_until(timeline::device_busy_until(a.context->device));
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  return space.free_mapped(a.base, MemoryKind::Device);
}

CUresult array_range(CUarray handle, std::size_t offset, std::size_t bytes, CUdeviceptr* at) {
  std::lock_guard lock(g_mutex);
  auto it = arrays().find(handle);
  if (it == arrays().end() || !it->second.context->active.load(std::memory_order_acquire)) return CUDA_ERROR_INVALID_HANDLE;
  std::size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > it->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  *at = it->second.base + offset;
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim
