// A program linked with -lcuda with the two bugs UVMPOOL_GUARD is for, each run by a kernel of the
// catalog (uvmpool_fill_u32: the simulator's module image, or on a GPU the committed PTX). Each mode
// prints what cuCtxSynchronize answered after the bad kernel and exits 0; the tests match the line.
//   overflow         two 4 KiB allocations; a kernel writes 1025 words into the first. Under guard
//                    the 1025th word lies in the unmapped guard: 700 (CUDA_ERROR_ILLEGAL_ADDRESS).
//                    Without, 0, and the line says whether the neighbour's first word was overwritten.
//   use-after-free   a 64 KiB allocation freed, another of the same size made, then a kernel writes
//                    through the stale pointer: 700 under guard, 0 without (it hits the new one).
#include <cuda.h>

#include <cstdint>
#include <cstring>

#include "catalog_kernel.h"

namespace {

CUfunction fill_kernel() { return catalog_kernel("uvmpool_fill_u32"); }

CUresult fill_words(CUfunction f, CUdeviceptr dst, std::uint64_t count, std::uint32_t value) {
  void* params[] = {&dst, &count, &value};
  CU(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  return cuCtxSynchronize();
}

int overflow() {
  use_primary_context();
  const CUfunction f = fill_kernel();
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, 4096));
  CU(cuMemAlloc(&b, 4096));
  CU(cuMemsetD32(b, 0x11111111u, 1024));
  const CUresult r = fill_words(f, a, 1024 + 1, 0xdeadbeefu);
  std::printf("overflow: kernel writing one word past the end: cuCtxSynchronize returned %d\n", int(r));
  if (r == CUDA_SUCCESS) {
    std::uint32_t first = 0;
    CU(cuMemcpyDtoH(&first, b, sizeof first));
    std::printf("overflow: the neighbour %s (its first word reads 0x%08x)\n",
                b == a + 4096 && first == 0xdeadbeefu ? "was overwritten" : "was not reached", first);
  }
  return 0;
}

int use_after_free() {
  use_primary_context();
  const CUfunction f = fill_kernel();
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, 64 << 10));
  CU(cuMemFree(a));
  CU(cuMemAlloc(&b, 64 << 10));
  const CUresult r = fill_words(f, a, 1, 0xdeadbeefu);
  std::printf("use-after-free: kernel writing through the freed pointer: cuCtxSynchronize returned %d\n", int(r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "overflow") == 0) return overflow();
  if (std::strcmp(mode, "use-after-free") == 0) return use_after_free();
  std::fprintf(stderr, "usage: client_guard overflow|use-after-free\n");
  return 2;
}
