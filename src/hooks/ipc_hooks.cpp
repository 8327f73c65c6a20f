// Hooks of CUDA IPC and of the handle queries NCCL makes: count, route, return. A uvmpool handle is
// opened (and its mapping closed) here, by any uvmpool process, pool or not; everything else goes to
// the backend, which exports pool memory itself and passes the driver's own memory on (ipc.h).
#include "config/log.h"
#include "hooks/backend.h"
#include "hooks/hooks.h"
#include "hooks/ipc.h"
#include "stats/counters.h"

namespace uvmpool::hooks::impl {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  stats::count_hook(driver::Fn::cuIpcGetMemHandle);
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return backend().ipc_get(handle, ptr);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  stats::count_hook(driver::Fn::cuIpcOpenMemHandle_v2);
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ipc::is_uvmpool_handle(handle)) return ipc::open_handle(ptr, handle, flags);
  return backend().ipc_open(ptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr ptr) {
  stats::count_hook(driver::Fn::cuIpcCloseMemHandle);
  CUresult r = CUDA_SUCCESS;
  if (ipc::close_handle(ptr, &r)) return r;
  r = backend().ipc_close(ptr);
  if (r != CUDA_SUCCESS) {
    log::warn("cuIpcCloseMemHandle({:#x}): not memory opened with cuIpcOpenMemHandle, or closed already ({})", ptr,
              static_cast<int>(r));
  }
  return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  stats::count_hook(driver::Fn::cuMemRetainAllocationHandle);
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return backend().retain_allocation_handle(handle, addr);
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  stats::count_hook(driver::Fn::cuMemGetAllocationPropertiesFromHandle);
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return backend().allocation_properties(prop, handle);
}

}  // namespace uvmpool::hooks::impl
