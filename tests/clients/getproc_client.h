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
