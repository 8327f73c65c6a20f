// cuPointerGetAttribute(s). Each attribute is written with the type cuda.h documents for it; the
// boolean ones as 4-byte ints, as the real driver writes them (measured on an H200, driver 580).
#include <cstring>
#include <mutex>

#include "driver/pointer_attribute_values.h"
#include "sim/address_space.h"
#include "sim/contexts.h"
#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

// What the attributes describe, copied out under the lock.
struct PointerInfo {
  bool found = false;
  Mapping mapping;
  Reservation reservation;  // VMM: the reservation holding the mapping
  unsigned long long handle_types = 0;
};

PointerInfo look_up(CUdeviceptr ptr) {
  PointerInfo info;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const Mapping* m = space.find_mapping(ptr);
  if (m == nullptr || ptr - m->base >= m->user_size) return info;
  info.found = true;
  info.mapping = *m;
  info.reservation = Reservation{m->base, m->user_size};
  if (m->kind == MemoryKind::Vmm) {
    if (const Reservation* r = space.find_reservation(ptr)) info.reservation = *r;
    if (const Physical* p = space.find_physical(m->physical)) info.handle_types = p->prop.requestedHandleTypes;
  }
  return info;
}

// The access flags of the current context's device (device memory: its own device has read-write).
int access_flags(const Mapping& m) {
  if (m.kind != MemoryKind::Vmm) return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
  Context* context = nullptr;
  if (current_context(&context) != CUDA_SUCCESS) return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
  for (const Access& a : m.access)
    if (a.location.type == CU_MEM_LOCATION_TYPE_DEVICE && a.location.id == context->device)
      return a.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                                           : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ;
  return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
}

using driver::Bool32;
using driver::write_null_attribute;
using driver::write_unknown_pointer_attribute;

template <typename T>
CUresult put(void* data, T value) {
  return driver::put_attribute(data, value);
}

// Writes one attribute of a known pointer. CUDA_ERROR_INVALID_VALUE where the attribute has no value
// for this memory; CUDA_ERROR_NOT_SUPPORTED for an attribute this sim cannot answer.
CUresult write_attribute(const PointerInfo& info, CUpointer_attribute attribute, CUdeviceptr ptr, void* data) {
  const Mapping& m = info.mapping;
  const bool vmm = m.kind == MemoryKind::Vmm;
  const bool host_memory = m.kind == MemoryKind::PinnedHost || m.device < 0;  // device < 0: host-located VMM
  switch (attribute) {
    // VMM memory belongs to no context: CUDA_SUCCESS and NULL (measured on an H200, driver 580).
    case CU_POINTER_ATTRIBUTE_CONTEXT: return put(data, to_handle(const_cast<Context*>(m.context)));
    // Host-located VMM memory is HOST memory, like pinned host allocations (measured on an H200,
    // driver 580, for HOST_NUMA; HOST assumed the same).
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return put<unsigned>(data, host_memory ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return put<CUdeviceptr>(data, ptr);
    // Host memory is reached by the host at the same address (UVA); device memory not at all.
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host_memory) return CUDA_ERROR_INVALID_VALUE;
      return put(data, reinterpret_cast<void*>(ptr));
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return put<Bool32>(data, 0);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return put<unsigned long long>(data, m.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return put<Bool32>(data, 0);
    // Pinned memory: the device of the context it was allocated in; host-located VMM: CU_DEVICE_CPU.
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return put<int>(data, m.kind == MemoryKind::PinnedHost && m.context != nullptr ? m.context->device
                            : m.device >= 0                                          ? m.device
                                                                                     : CU_DEVICE_CPU);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return put<Bool32>(data, m.kind == MemoryKind::Device);
    // For VMM the reservation, not the mapping (documented; cuMemGetAddressRange gives the mapping).
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return put<CUdeviceptr>(data, info.reservation.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return put<std::size_t>(data, info.reservation.size);
    case CU_POINTER_ATTRIBUTE_MAPPED: return put<Bool32>(data, 1);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return put<unsigned long long>(data, vmm ? info.handle_types : 0);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: return put<Bool32>(data, 0);  // not simulated
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return put<int>(data, access_flags(m));
    // Memory pools are not simulated: stream-ordered allocations report no pool.
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return put<CUmemoryPool>(data, nullptr);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return put<std::size_t>(data, m.size);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return put<CUdeviceptr>(data, m.base);
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return put<unsigned long long>(data, m.physical);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return put<Bool32>(data, 0);
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return CUDA_ERROR_NOT_SUPPORTED;  // GPUDirect RDMA is absent
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

// Memory the sim does not know (pageable host memory, a freed or unmapped address):
// CUDA_ERROR_INVALID_VALUE for every attribute.
CUresult impl::cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr_v2 ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const PointerInfo info = look_up(ptr);
  if (!info.found)
    return attribute == CU_POINTER_ATTRIBUTE_P2P_TOKENS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  return write_attribute(info, attribute, ptr, data);
}

// Unlike cuPointerGetAttribute, an unknown pointer is no error: like the real driver with unregistered
// host memory, the attributes get default values (see write_unknown) and the call succeeds. An
// attribute that has no value for known memory (HOST_POINTER of device memory) gets its NULL value.
CUresult impl::cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                      CUdeviceptr_v2 ptr) {
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The caller's array may hold any integer: each is read as one, and checked before it is an enum.
  const auto attribute = [attributes](unsigned i) {
    static_assert(sizeof(CUpointer_attribute) == sizeof(int));
    int value = 0;
    std::memcpy(&value, &attributes[i], sizeof value);
    return value;
  };
  for (unsigned i = 0; i < numAttributes; ++i)
    if (data[i] == nullptr || attribute(i) == CU_POINTER_ATTRIBUTE_P2P_TOKENS ||
        attribute(i) < CU_POINTER_ATTRIBUTE_CONTEXT || attribute(i) > CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE)
      return CUDA_ERROR_INVALID_VALUE;
  const PointerInfo info = look_up(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    const auto a = static_cast<CUpointer_attribute>(attribute(i));
    if (!info.found)
      write_unknown_pointer_attribute(a, ptr, data[i]);
    else if (write_attribute(info, a, ptr, data[i]) != CUDA_SUCCESS)
      write_null_attribute(a, data[i]);
  }
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim
