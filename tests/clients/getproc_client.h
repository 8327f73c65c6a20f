// For the runtime-like clients: every driver function through cuGetProcAddress_v2, as the CUDA runtime
// gets them. The program sets get_proc from dlsym(libcuda, "cuGetProcAddress_v2") first.
#pragma once

#include "client_common.h"
#include "driver/driver_api.h"

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
inline GetProc get_proc = nullptr;

// The function the driver (or uvmpool) hands out for `name` at `version`; exits when there is none.
template <typename F>
F resolve(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found{};
  const CUresult r = get_proc(name, &p, version, flags, &found);
  CLIENT_CHECK(r == CUDA_SUCCESS && p != nullptr, "cuGetProcAddress(%s, %d) -> %d", name, version, int(r));
  return reinterpret_cast<F>(p);
}

// As the runtime starts: libcuda.so.1 opened privately, get_proc from it, the driver initialized and
// device 0's primary context made current. Exits on failure; returns the libcuda handle.
inline void* open_driver_as_runtime(CUdevice* device) {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CLIENT_CHECK(libcuda != nullptr, "dlopen(libcuda.so.1): %s", dlerror());
  get_proc = reinterpret_cast<GetProc>(dlsym(libcuda, "cuGetProcAddress_v2"));
  CLIENT_CHECK(get_proc != nullptr, "no cuGetProcAddress_v2");
  namespace s = uvmpool::driver::sig;
  CU(resolve<s::cuInit>("cuInit", 2000)(0));
  CU(resolve<s::cuDeviceGet>("cuDeviceGet", 2000)(device, 0));
  CUcontext ctx = nullptr;
  CU(resolve<s::cuDevicePrimaryCtxRetain>("cuDevicePrimaryCtxRetain", 7000)(&ctx, *device));
  CU(resolve<s::cuCtxSetCurrent>("cuCtxSetCurrent", 4000)(ctx));
  return libcuda;
}
