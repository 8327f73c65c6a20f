// What cuPointerGetAttributes writes where it has no answer, for the simulated driver and for the
// hooks (pool address space that holds no live allocation), so that both write what NVIDIA's does.
//
// Each attribute is written with the type cuda.h documents for it, the boolean ones as 4-byte ints
// (measured on an H200, driver 580): a caller's int is neither overrun nor half-written.
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::driver {

using Bool32 = int;

template <typename T>
CUresult put_attribute(void* data, T value) {
  *static_cast<T*>(data) = value;
  return CUDA_SUCCESS;
}

// The NULL value of an attribute, written with the attribute's size; INVALID_VALUE for one cuda.h
// does not list (nothing written).
inline CUresult write_null_attribute(CUpointer_attribute attribute, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return put_attribute<CUcontext>(data, nullptr);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return put_attribute<unsigned>(data, 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return put_attribute<CUdeviceptr>(data, 0);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return put_attribute<void*>(data, nullptr);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return put_attribute<Bool32>(data, 0);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return put_attribute<unsigned long long>(data, 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return put_attribute<int>(data, 0);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return put_attribute<std::size_t>(data, 0);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return put_attribute<CUmemoryPool>(data, nullptr);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// What cuPointerGetAttributes writes for a pointer that names no memory the driver knows (pageable
// host memory, a freed allocation): NULL/0 as documented, except (measured on an H200, driver 580)
// HOST_POINTER, which is the pointer itself, and DEVICE_ORDINAL, which is -2 (CU_DEVICE_INVALID);
// RANGE_START_ADDR and RANGE_SIZE are left unwritten. The call succeeds
// (tests/fidelity/attributes_test.cpp, GetAttributesOf...).
inline void write_unknown_pointer_attribute(CUpointer_attribute attribute, CUdeviceptr ptr, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: put_attribute(data, reinterpret_cast<void*>(ptr)); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put_attribute<int>(data, CU_DEVICE_INVALID); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: break;
    default: write_null_attribute(attribute, data);
  }
}

}  // namespace uvmpool::driver
