// The seam between the hooks and whatever serves device memory: the hooks translate a driver call
// into one of these, and nothing else. The pool (PoolBackend) serves device memory; DriverBackend
// passes calls to the real driver; backend() is the one place that chooses.
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::hooks {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual CUresult alloc(CUdeviceptr* dptr, size_t bytes) = 0;
  virtual CUresult alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                               unsigned element_bytes) = 0;
  virtual CUresult free(CUdeviceptr ptr) = 0;
  virtual CUresult get_info(size_t* free_bytes, size_t* total_bytes) = 0;
  virtual CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) = 0;
  virtual CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) = 0;
  virtual CUresult pointer_attributes(unsigned count, CUpointer_attribute* attributes, void** data,
                                      CUdeviceptr ptr) = 0;
  // Stream-ordered calls take an explicit stream: the per-thread (_ptsz) hooks pass
  // CU_STREAM_PER_THREAD for stream 0, so one entry point serves both variants.
  virtual CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream) = 0;
  virtual CUresult alloc_from_pool_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                         CUstream stream) = 0;
  virtual CUresult free_async(CUdeviceptr ptr, CUstream stream) = 0;
  virtual CUresult create(CUmemGenericAllocationHandle* handle, size_t size,
                          const CUmemAllocationProp* prop, unsigned long long flags) = 0;
  virtual CUresult release(CUmemGenericAllocationHandle handle) = 0;
  // The program's own cuMemMap and cuMemUnmap: a handle's memory lives until its last mapping goes.
  virtual CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                       unsigned long long flags) = 0;
  virtual CUresult unmap(CUdeviceptr ptr, size_t size) = 0;
  // cuStreamDestroy: the pool first covers what was freed on the stream and not yet reused.
  virtual CUresult stream_destroy(CUstream stream) = 0;
  // cuCtxEnablePeerAccess / cuCtxDisablePeerAccess: pool mappings and IPC imports on the peer's
  // device follow the driver's answer (src/pool/peer_access.h).
  virtual CUresult peer_access(CUcontext peer, unsigned flags, bool enable) = 0;
  // CUDA IPC (docs/architecture.md "CUDA IPC"): pool memory is exported by uvmpool (src/hooks/ipc.h);
  // uvmpool handles are opened and closed by the hooks before a backend sees them, so ipc_open and
  // ipc_close only get the driver's own.
  virtual CUresult ipc_get(CUipcMemHandle* handle, CUdeviceptr ptr) = 0;
  virtual CUresult ipc_open(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned flags) = 0;
  virtual CUresult ipc_close(CUdeviceptr ptr) = 0;
  // What NCCL's buffer registration asks of the handle under an address.
  virtual CUresult retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) = 0;
  virtual CUresult allocation_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) = 0;
};

// The backend serving this process: the pool, or the driver under UVMPOOL_POOL=0 or without one.
Backend& backend();
// The real driver, for what the pool passes on.
Backend& driver_backend();

}  // namespace uvmpool::hooks
