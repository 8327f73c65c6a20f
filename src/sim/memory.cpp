// Context-bound memory: cuMemAlloc and friends, pinned host memory, the stream-ordered allocator,
// cuMemGetInfo and cuMemGetAddressRange.
#include <mutex>

#include "sim/address_space.h"
#include "sim/clock.h"
#include "sim/contexts.h"
#include "sim/entry_points.h"
#include "sim/settings.h"
#include "sim/streams_events.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

constexpr std::size_t kLargePage = std::size_t{2} << 20;

// Allocations of 2 MiB and more are 2 MiB-aligned and -sized, as on the GPU; smaller ones are
// page-aligned here (the real driver packs them into 2 MiB pages at 256-byte or larger alignment).
std::size_t device_alignment(std::size_t bytes) { return bytes >= kLargePage ? kLargePage : page_size(); }

CUresult allocate(Context* context, MemoryKind kind, std::size_t bytes, CUdeviceptr* out) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  // Checked again under the lock, so a context being destroyed cannot gain an allocation.
  if (!context->active.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  const std::size_t alignment = kind == MemoryKind::Device ? device_alignment(bytes) : page_size();
  std::uintptr_t base = 0;
  CUresult status = space.allocate_mapped(kind, context, context->device, bytes, alignment, &base);
  if (status == CUDA_SUCCESS) *out = base;
  return status;
}

CUresult alloc_device(CUdeviceptr_v2* dptr, size_t bytesize, Context* context) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return allocate(context, MemoryKind::Device, bytesize, dptr);
}

// cuMemAlloc's modeled cost: small allocations come out of the driver's own 2 MiB pages.
void charge_alloc(std::size_t bytes) {
  constexpr std::uint64_t kSmallAllocNs = 2100;  // H200, 4 KiB
  const Costs& c = clock::costs();
  clock::charge(bytes < kLargePage ? kSmallAllocNs : c.alloc_ns + clock::per_gib_ns(bytes, c.alloc_ns_per_gib));
}

// Frees the mapping of `kind` at `base`. Like the real driver, cuMemFree and cuMemFreeHost first wait
// for the device's work, so they never free memory under it; that wait is modeled on the clock.
CUresult free_synchronously(Context* context, std::uintptr_t base, MemoryKind kind) {
  clock::wait_until(timeline::device_busy_until(context->device));
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  const Mapping* m = space.find_mapping(base);
  const std::size_t size = m != nullptr && m->base == base ? m->size : 0;
  // Interior pointers, VMM ranges and host memory are all "not an allocation" of that kind.
  const CUresult status = space.free_mapped(base, kind);
  if (status == CUDA_SUCCESS) {
    const Costs& c = clock::costs();
    clock::charge(kind == MemoryKind::Device ? c.free_ns + clock::per_gib_ns(size, c.free_ns_per_gib)
                                             : clock::per_gib_ns(size, c.free_host_ns_per_gib));
  }
  return status;
}

// The stream-ordered free needs no wait: the simulator executes work at submission, so the memory is
// no longer used by the stream's earlier work when it goes.
CUresult free_device(CUdeviceptr_v2 dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  return space.free_mapped(dptr, MemoryKind::Device);
}

// The stream-ordered allocator runs synchronously: the allocation exists when the call returns and
// is freed at once by cuMemFreeAsync, which is a legal ordering. Memory pools are not simulated:
// cuMemAllocFromPoolAsync ignores its pool and allocates from the device's capacity.
CUresult alloc_async(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  return alloc_device(dptr, bytesize, context);
}

// Memory from cuMemAlloc may be freed with cuMemFreeAsync and the other way round.
CUresult free_async(CUdeviceptr_v2 dptr, CUstream hStream) {
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  return free_device(dptr);
}

CUresult alloc_host(void** pp, size_t bytesize) {
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  CUdeviceptr base = 0;
  if (CUresult status = allocate(context, MemoryKind::PinnedHost, bytesize, &base); status != CUDA_SUCCESS)
    return status;
  clock::charge(clock::per_gib_ns(bytesize, clock::costs().host_alloc_ns_per_gib));
  *pp = reinterpret_cast<void*>(base);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult impl::cuMemAlloc_v2(CUdeviceptr_v2* dptr, size_t bytesize) {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  const CUresult status = alloc_device(dptr, bytesize, context);
  if (status == CUDA_SUCCESS) charge_alloc(bytesize);
  return status;
}

// The pitch is the width rounded up to 512 bytes, the real driver's pitch alignment on recent GPUs.
CUresult impl::cuMemAllocPitch_v2(CUdeviceptr_v2* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                  unsigned int ElementSizeBytes) {
  constexpr std::size_t kPitchAlignment = 512;
  constexpr std::size_t kMaxPitch = 2147483647;  // CU_DEVICE_ATTRIBUTE_MAX_PITCH
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  if (WidthInBytes > kMaxPitch) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t pitch = align_up(WidthInBytes, kPitchAlignment);
  if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult status = alloc_device(dptr, pitch * Height, context); status != CUDA_SUCCESS) return status;
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemFree_v2(CUdeviceptr_v2 dptr) {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  if (dptr == 0) return CUDA_SUCCESS;
  return free_synchronously(context, dptr, MemoryKind::Device);
}

CUresult impl::cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  *total = space.capacity(context->device);
  *free = *total - space.used(context->device);
  return CUDA_SUCCESS;
}

// For cuMemAlloc and pinned memory: the allocation (with the size asked for). For VMM: the one
// cuMemMap piece containing the address, not the reservation, as the real driver answers.
CUresult impl::cuMemGetAddressRange_v2(CUdeviceptr_v2* pbase, size_t* psize, CUdeviceptr_v2 dptr) {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const Mapping* m = space.find_mapping(dptr);
  if (m == nullptr || dptr - m->base >= m->user_size) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = m->base;
  if (psize != nullptr) *psize = m->user_size;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemAllocHost_v2(void** pp, size_t bytesize) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return alloc_host(pp, bytesize);
}

// Every pinned allocation is portable and mapped, with one address for host and device (UVA), so
// the flags are only checked. Write-combined memory is ordinary memory here.
CUresult impl::cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  constexpr unsigned kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return alloc_host(pp, bytesize);
}

CUresult impl::cuMemFreeHost(void* p) {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return free_synchronously(context, reinterpret_cast<std::uintptr_t>(p), MemoryKind::PinnedHost);
}

CUresult impl::cuMemHostGetDevicePointer_v2(CUdeviceptr_v2* pdptr, void* p, unsigned int Flags) {
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const Mapping* m = space.find_mapping(address);
  if (m == nullptr || m->kind != MemoryKind::PinnedHost || address - m->base >= m->user_size)
    return CUDA_ERROR_INVALID_VALUE;
  *pdptr = address;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemAllocAsync(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream);
}
CUresult impl::cuMemAllocAsync_ptsz(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream);
}
CUresult impl::cuMemFreeAsync(CUdeviceptr_v2 dptr, CUstream hStream) {
  return free_async(dptr, hStream);
}
CUresult impl::cuMemFreeAsync_ptsz(CUdeviceptr_v2 dptr, CUstream hStream) {
  return free_async(dptr, hStream);
}
CUresult impl::cuMemAllocFromPoolAsync(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                       CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream);
}
CUresult impl::cuMemAllocFromPoolAsync_ptsz(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream);
}

}  // namespace uvmpool::sim
