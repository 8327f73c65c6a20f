// Peer access to pool memory, as a program linked with -lcuda uses it: allocations on device 0 (a
// slab slot and a stitched range) made before device 1's context enables peer access to device 0's,
// one made after, each summed by a kernel of device 1 (uvmpool_sum_u32: the simulator's module image,
// or on a GPU the committed PTX). The route is selectable, since the runtime reaches the driver through
// cuGetProcAddress: `linked` calls cuCtxEnablePeerAccess directly, `getproc` through the pointer that
// cuGetProcAddress returns. Prints "peer client: ok ..." and exits 0, or says what went wrong and exits 1.
// Needs two devices (UVMPOOL_SIM_DEVICES=2 on the simulator).
#include <cuda.h>

#include <cstdint>
#include <cstring>

#include "catalog_kernel.h"

namespace {

// The sum of `count` words at p by a kernel of the current context, or the error it met.
CUresult sum(CUfunction f, CUdeviceptr p, std::uint64_t count, std::uint64_t* total) {
  CUdeviceptr out = 0;
  CU(cuMemAlloc(&out, sizeof *total));
  CU(cuMemsetD8(out, 0, sizeof *total));
  void* params[] = {&p, &count, &out};
  CU(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  const CUresult r = cuCtxSynchronize();
  if (r == CUDA_SUCCESS) CU(cuMemcpyDtoH(total, out, sizeof *total));
  if (r == CUDA_SUCCESS) CU(cuMemFree(out));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const bool getproc = argc > 1 && std::strcmp(argv[1], "getproc") == 0;
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  if (count < 2) {
    std::printf("peer client: needs two devices, found %d\n", count);
    return 1;
  }
  CUcontext c0 = nullptr, c1 = nullptr;
  CU(cuDevicePrimaryCtxRetain(&c0, 0));
  CU(cuDevicePrimaryCtxRetain(&c1, 1));
  int can = 0;
  CU(cuDeviceCanAccessPeer(&can, 1, 0));
  if (!can) {
    std::printf("peer client: device 1 cannot access device 0 here\n");
    return 1;
  }
  struct Block {
    CUdeviceptr p;
    std::uint64_t words;
    std::uint32_t value;
  } blocks[3] = {{0, 1024, 3}, {0, (5u << 20) / 4, 5}, {0, (9u << 20) / 4, 7}};
  CU(cuCtxSetCurrent(c0));
  for (int i = 0; i < 2; ++i) {
    CU(cuMemAlloc(&blocks[i].p, blocks[i].words * 4));
    CU(cuMemsetD32(blocks[i].p, blocks[i].value, blocks[i].words));
  }
  CU(cuCtxSetCurrent(c1));
  const CUfunction f = catalog_kernel("uvmpool_sum_u32");
  CUresult enabled;
  if (getproc) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    CU(cuGetProcAddress("cuCtxEnablePeerAccess", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    enabled = reinterpret_cast<CUresult (*)(CUcontext, unsigned)>(fn)(c0, 0);
  } else {
    enabled = cuCtxEnablePeerAccess(c0, 0);
  }
  if (enabled != CUDA_SUCCESS) {
    std::printf("peer client: cuCtxEnablePeerAccess returned %d\n", int(enabled));
    return 1;
  }
  CU(cuCtxSetCurrent(c0));
  CU(cuMemAlloc(&blocks[2].p, blocks[2].words * 4));
  CU(cuMemsetD32(blocks[2].p, blocks[2].value, blocks[2].words));
  CU(cuCtxSynchronize());
  CU(cuCtxSetCurrent(c1));
  for (const Block& b : blocks) {
    std::uint64_t total = 0;
    const CUresult r = sum(f, b.p, b.words, &total);
    if (r != CUDA_SUCCESS || total != b.words * b.value) {
      std::printf("peer client: device 1 summing %llu words of device 0 got %llu (error %d), not %llu\n",
                  (unsigned long long)b.words, (unsigned long long)total, int(r),
                  (unsigned long long)(b.words * b.value));
      return 1;
    }
  }
  CU(cuCtxDisablePeerAccess(c0));
  CU(cuCtxSetCurrent(c0));
  for (const Block& b : blocks) CU(cuMemFree(b.p));
  std::printf("peer client: ok (%s): device 1 read 3 allocations of device 0, made before and after peer access\n",
              getproc ? "cuGetProcAddress" : "linked");
  return 0;
}
