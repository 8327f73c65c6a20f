// cuMemAlloc and friends: accounting against the device's capacity, out-of-memory and recovery,
// alignment, pitch, address ranges, the stream-ordered allocator, and pinned host memory.
#include <thread>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using MemAlloc = SimTest;
using HostMemory = SimTest;

TEST_F(MemAlloc, GetInfoTotalIsTheDeviceMemoryAndTheContextTakesALittle) {
  std::size_t free = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free, &total));
  EXPECT_EQ(total, kDeviceMemory);
  EXPECT_LT(free, total);
  EXPECT_GE(free, total - 2 * kMiB);
}

TEST_F(MemAlloc, AllocLowersFreeMemoryByItsSizeAndFreeGivesItBack) {
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 10 * kMiB));
  EXPECT_EQ(free_bytes(), before - 10 * kMiB);
  ASSERT_CU(cuMemFree(p));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemAlloc, ZeroBytesIsInvalidValue) {
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(nullptr, 16));
}

TEST_F(MemAlloc, LargeAllocationsAreTwoMiBAlignedAndSmallOnesAtLeast256) {
  CUdeviceptr large = 0, small = 0;
  ASSERT_CU(cuMemAlloc(&large, 3 * kMiB));
  ASSERT_CU(cuMemAlloc(&small, 100));
  EXPECT_EQ(large % (2 * kMiB), 0u);
  EXPECT_EQ(small % 256, 0u);
}

TEST_F(MemAlloc, AllocationsAreHostAddressesTheHostCanUse) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  bytes[0] = 42;
  unsigned char back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, p, 1));
  EXPECT_EQ(back, 42);
}

TEST_F(MemAlloc, OutOfMemoryAtCapacityAndAllocatableAgainAfterAFree) {
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr p = 0;
  CUresult r = CUDA_SUCCESS;
  while ((r = cuMemAlloc(&p, 32 * kMiB)) == CUDA_SUCCESS) blocks.push_back(p);
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r);
  EXPECT_EQ(blocks.size(), kDeviceMemory / (32 * kMiB) - 1);  // the context's share is missing
  EXPECT_LT(free_bytes(), 32 * kMiB);
  ASSERT_CU(cuMemFree(blocks.back()));
  EXPECT_CU(cuMemAlloc(&p, 32 * kMiB));
}

TEST_F(MemAlloc, AllocOfMoreThanTheDeviceIsOutOfMemoryAndLeaksNothing) {
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, 2 * kDeviceMemory));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, ~std::size_t{0}));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemAlloc, FreeOfInteriorUnknownOrFreedPointerIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, kMiB));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFree(p + 256));
  int local = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFree(reinterpret_cast<CUdeviceptr>(&local)));
  ASSERT_CU(cuMemFree(p));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFree(p));
  EXPECT_CU(cuMemFree(0));
}

TEST_F(MemAlloc, PitchIsTheWidthRoundedTo512AndElementSizeIsChecked) {
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&p, &pitch, 100, 10, 4));
  EXPECT_EQ(pitch, 512u);
  ASSERT_CU(cuMemAllocPitch(&p, &pitch, 1025, 3, 16));
  EXPECT_EQ(pitch, 1536u);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &size, p));
  EXPECT_EQ(size, 3 * 1536u);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 100, 10, 2));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 0, 10, 4));
}

TEST_F(MemAlloc, AddressRangeIsTheAllocationWithTheSizeAskedFor) {
  CUdeviceptr p = 0, base = 0;
  std::size_t size = 0;
  ASSERT_CU(cuMemAlloc(&p, 3 * kMiB + 5));
  ASSERT_CU(cuMemGetAddressRange(&base, &size, p + 3 * kMiB + 4));
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 3 * kMiB + 5);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, p + 3 * kMiB + 5));
  int local = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(&local)));
}

TEST_F(MemAlloc, StreamOrderedAllocAndFreeHappenAtOnce) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  const std::size_t before = free_bytes();
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAllocAsync(&a, 4 * kMiB, stream));
  ASSERT_CU(cuMemAllocFromPoolAsync(&b, 4 * kMiB, nullptr, nullptr));  // the pool is not simulated
  EXPECT_EQ(free_bytes(), before - 8 * kMiB);
  ASSERT_CU(cuMemFreeAsync(a, stream));
  ASSERT_CU(cuMemFree(b));  // either free works for either allocation
  EXPECT_EQ(free_bytes(), before);
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuMemAllocAsync(&a, 4096, stream));
}

TEST_F(MemAlloc, ConcurrentAllocationsFromManyThreadsKeepTheAccounting) {
  const std::size_t before = free_bytes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this] {
      ASSERT_CU(cuCtxSetCurrent(ctx));
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr p = 0;
        ASSERT_CU(cuMemAlloc(&p, 4096 * (1 + i % 7)));
        ASSERT_CU(cuMemsetD8(p, static_cast<unsigned char>(i), 4096));
        ASSERT_CU(cuMemFree(p));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(HostMemory, PinnedMemoryIsOneAddressForHostAndDevice) {
  void* host = nullptr;
  ASSERT_CU(cuMemHostAlloc(&host, 8192, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device, static_cast<char*>(host) + 16, 0));
  EXPECT_EQ(device, reinterpret_cast<CUdeviceptr>(host) + 16);
  static_cast<char*>(host)[100] = 7;
  ASSERT_CU(cuMemsetD8(device, 9, 4));  // the device writes through the same address
  EXPECT_EQ(static_cast<char*>(host)[16], 9);
  char back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, reinterpret_cast<CUdeviceptr>(host) + 100, 1));
  EXPECT_EQ(back, 7);
  EXPECT_CU(cuMemFreeHost(host));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(host));
}

TEST_F(HostMemory, HostMemoryLimitIsOutOfMemory) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CU(cuMemAllocHost(&a, kHostMemory / 2));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocHost(&b, kHostMemory / 2 + 4096));
  ASSERT_CU(cuMemFreeHost(a));
  ASSERT_CU(cuMemAllocHost(&b, kHostMemory / 2 + 4096));
  EXPECT_CU(cuMemFreeHost(b));
}

TEST_F(HostMemory, BadFlagsAndUnknownPointersAreInvalidValue) {
  void* host = nullptr;
  CUdeviceptr device = 0;
  int local = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc(&host, 4096, 0x80));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&device, &local, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(&local));
  CUdeviceptr d = 0;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(reinterpret_cast<void*>(d)));  // device memory
}

}  // namespace
}  // namespace simtest
