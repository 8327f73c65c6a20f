#include "pool/vmm.h"

#include "config/log.h"

namespace uvmpool::pool {
namespace {

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

std::size_t Vmm::granularity() const {
  if (d_.cuMemGetAllocationGranularity == nullptr) return 0;
  const CUmemAllocationProp prop = device_prop(device_);
  std::size_t g = 0;
  if (d_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
  return g;
}

CUresult Vmm::create_chunks(std::span<Handle> out, std::size_t size) const {
  const CUmemAllocationProp prop = device_prop(device_);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const CUresult r = d_.cuMemCreate(&out[i], size, &prop, 0);
    if (r != CUDA_SUCCESS) {
      release_chunks(out.first(i));
      return r;
    }
  }
  return CUDA_SUCCESS;
}

void Vmm::release_chunks(std::span<const Handle> chunks) const {
  for (Handle h : chunks) {
    const CUresult r = d_.cuMemRelease(h);
    if (r != CUDA_SUCCESS) log::warn("cuMemRelease of a pool chunk failed ({}); its memory may leak", static_cast<int>(r));
  }
}

CUresult Vmm::reserve(CUdeviceptr* va, std::size_t size, std::size_t alignment) const {
  return d_.cuMemAddressReserve(va, size, alignment, 0, 0);
}

void Vmm::free_reservation(CUdeviceptr va, std::size_t size) const {
  const CUresult r = d_.cuMemAddressFree(va, size);
  if (r != CUDA_SUCCESS) log::warn("cuMemAddressFree failed ({})", static_cast<int>(r));
}

CUresult Vmm::map(CUdeviceptr va, std::span<const Handle> chunks, std::size_t chunk_size) const {
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const CUresult r = d_.cuMemMap(va + i * chunk_size, chunk_size, 0, chunks[i], 0);
    if (r != CUDA_SUCCESS) {
      unmap(va, i, chunk_size);
      return r;
    }
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult r = d_.cuMemSetAccess(va, chunks.size() * chunk_size, &access, 1);
  if (r != CUDA_SUCCESS) {
    unmap(va, chunks.size(), chunk_size);
    return r;
  }
  return CUDA_SUCCESS;
}

void Vmm::unmap(CUdeviceptr va, std::size_t count, std::size_t chunk_size) const {
  // One call per chunk: each chunk was mapped by its own cuMemMap, and the driver unmaps whole mappings.
  for (std::size_t i = 0; i < count; ++i) {
    const CUresult r = d_.cuMemUnmap(va + i * chunk_size, chunk_size);
    if (r != CUDA_SUCCESS) log::warn("cuMemUnmap of a pool chunk failed ({})", static_cast<int>(r));
  }
}

}  // namespace uvmpool::pool
