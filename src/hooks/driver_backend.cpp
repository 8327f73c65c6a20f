// The backend that lets the real driver serve everything: under UVMPOOL_POOL=0, and for what the
// pool does not take (foreign pointers, explicit memory pools, devices without VMM).
#include "driver/real_driver.h"
#include "hooks/backend.h"
#include "pool/peer_access.h"

namespace uvmpool::hooks {
namespace {

// Calls the real driver's `symbol`, or answers as a machine without a driver would.
#define UVMPOOL_CALL_REAL(symbol, ...)                                            \
  do {                                                                            \
    const driver::RealDriver* d = driver::real();                                 \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE; \
    return d->table.symbol(__VA_ARGS__);                                          \
  } while (0)

class DriverBackend final : public Backend {
 public:
  CUresult alloc(CUdeviceptr* dptr, size_t bytes) override { UVMPOOL_CALL_REAL(cuMemAlloc_v2, dptr, bytes); }
  CUresult alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned element_bytes) override {
    UVMPOOL_CALL_REAL(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
  }
  CUresult free(CUdeviceptr ptr) override { UVMPOOL_CALL_REAL(cuMemFree_v2, ptr); }
  CUresult get_info(size_t* free_bytes, size_t* total_bytes) override {
    UVMPOOL_CALL_REAL(cuMemGetInfo_v2, free_bytes, total_bytes);
  }
  CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) override {
    UVMPOOL_CALL_REAL(cuMemGetAddressRange_v2, base, size, ptr);
  }
  CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) override {
    UVMPOOL_CALL_REAL(cuPointerGetAttribute, data, attribute, ptr);
  }
  CUresult pointer_attributes(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) override {
    UVMPOOL_CALL_REAL(cuPointerGetAttributes, count, attributes, data, ptr);
  }
  CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream) override {
    UVMPOOL_CALL_REAL(cuMemAllocAsync, dptr, bytes, stream);
  }
  CUresult alloc_from_pool_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) override {
    UVMPOOL_CALL_REAL(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream);
  }
  CUresult free_async(CUdeviceptr ptr, CUstream stream) override { UVMPOOL_CALL_REAL(cuMemFreeAsync, ptr, stream); }
  CUresult create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                  unsigned long long flags) override {
    UVMPOOL_CALL_REAL(cuMemCreate, handle, size, prop, flags);
  }
  CUresult release(CUmemGenericAllocationHandle handle) override { UVMPOOL_CALL_REAL(cuMemRelease, handle); }
  CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags) override {
    UVMPOOL_CALL_REAL(cuMemMap, ptr, size, offset, handle, flags);
  }
  CUresult unmap(CUdeviceptr ptr, size_t size) override { UVMPOOL_CALL_REAL(cuMemUnmap, ptr, size); }
  CUresult stream_destroy(CUstream stream) override { UVMPOOL_CALL_REAL(cuStreamDestroy_v2, stream); }
  CUresult peer_access(CUcontext peer, unsigned flags, bool enable) override {
    const driver::RealDriver* real = driver::real();
    if (real == nullptr || (enable ? real->table.cuCtxEnablePeerAccess == nullptr : real->table.cuCtxDisablePeerAccess == nullptr))
      return CUDA_ERROR_NO_DEVICE;
    const driver::Table& d = real->table;
    const CUresult r = enable ? d.cuCtxEnablePeerAccess(peer, flags) : d.cuCtxDisablePeerAccess(peer);
    // Mappings follow only what the driver did: a refused or repeated call changes nothing.
    if (r != CUDA_SUCCESS) return r;
    CUdevice accessor = -1, owner = -1;
    CUcontext popped = nullptr;
    if (d.cuCtxGetDevice(&accessor) != CUDA_SUCCESS || d.cuCtxPushCurrent_v2(peer) != CUDA_SUCCESS) return r;
    const CUresult got = d.cuCtxGetDevice(&owner);
    d.cuCtxPopCurrent_v2(&popped);
    if (got != CUDA_SUCCESS) return r;
    if (enable)
      pool::PeerAccess::get().enabled(d, accessor, owner);
    else
      pool::PeerAccess::get().disabled(d, accessor, owner);
    return r;
  }
  CUresult ipc_get(CUipcMemHandle* handle, CUdeviceptr ptr) override { UVMPOOL_CALL_REAL(cuIpcGetMemHandle, handle, ptr); }
  CUresult ipc_open(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned flags) override {
    UVMPOOL_CALL_REAL(cuIpcOpenMemHandle_v2, ptr, handle, flags);
  }
  CUresult ipc_close(CUdeviceptr ptr) override { UVMPOOL_CALL_REAL(cuIpcCloseMemHandle, ptr); }
  CUresult retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) override {
    UVMPOOL_CALL_REAL(cuMemRetainAllocationHandle, handle, addr);
  }
  CUresult allocation_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) override {
    UVMPOOL_CALL_REAL(cuMemGetAllocationPropertiesFromHandle, prop, handle);
  }
};

}  // namespace

Backend& driver_backend() {
  static DriverBackend* backend = new DriverBackend;  // never destroyed: used during exit
  return *backend;
}

}  // namespace uvmpool::hooks
