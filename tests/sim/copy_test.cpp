// Copies and memsets: data moves, every variant works, and a device side outside mapped, accessible
// memory is CUDA_ERROR_INVALID_VALUE rather than a crash.
#include <cstring>
#include <numeric>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using Copies = SimTest;
using Memsets = SimTest;

// An exported per-thread variant, found the way the CUDA runtime finds it.
template <typename Fn>
Fn per_thread(const char* name) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found{};
  EXPECT_EQ(cuGetProcAddress(name, &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found),
            CUDA_SUCCESS);
  return reinterpret_cast<Fn>(pfn);
}

TEST_F(Copies, HostToDeviceToDeviceToHostRoundTrip) {
  std::vector<std::uint32_t> in(1024), out(1024, 0);
  std::iota(in.begin(), in.end(), 1u);
  const std::size_t bytes = in.size() * sizeof(in[0]);
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, bytes));
  ASSERT_CU(cuMemAlloc(&b, bytes));
  ASSERT_CU(cuMemcpyHtoD(a, in.data(), bytes));
  ASSERT_CU(cuMemcpyDtoD(b, a, bytes));
  ASSERT_CU(cuMemcpyDtoH(out.data(), b, bytes));
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0u);
  ASSERT_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(out.data()), a, bytes));  // unified addressing
  EXPECT_EQ(out, in);
}

TEST_F(Copies, AsyncAndPerThreadVariantsCopyAtOnce) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  std::uint64_t in = 0x0123456789ABCDEFull, out = 0;
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, 64));
  ASSERT_CU(cuMemAlloc(&b, 64));
  ASSERT_CU(cuMemcpyHtoDAsync(a, &in, 8, stream));
  ASSERT_CU(cuMemcpyDtoDAsync(b, a, 8, CU_STREAM_LEGACY));
  ASSERT_CU(cuMemcpyDtoHAsync(&out, b, 8, stream));
  EXPECT_EQ(out, in);
  out = 0;
  auto htod = per_thread<CUresult (*)(CUdeviceptr, const void*, std::size_t)>("cuMemcpyHtoD");
  auto dtoh_async = per_thread<CUresult (*)(void*, CUdeviceptr, std::size_t, CUstream)>("cuMemcpyDtoHAsync");
  ASSERT_NE(htod, nullptr);
  ASSERT_NE(dtoh_async, nullptr);
  in = 77;
  ASSERT_CU(htod(a, &in, 8));
  ASSERT_CU(dtoh_async(&out, a, 8, CU_STREAM_PER_THREAD));
  EXPECT_EQ(out, 77u);
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(Copies, DeviceSideOutsideMappedMemoryIsInvalidValue) {
  char buffer[64] = {};
  CUdeviceptr p = 0, va = 0;
  ASSERT_CU(cuMemAlloc(&p, 4 * kMiB));
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 0, 0, 0));
  // Reserved but unmapped.
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(va, buffer, sizeof(buffer)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(buffer, va + 64, sizeof(buffer)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(va, p, 64));
  // Running past the end of an allocation into unmapped space.
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(p, p + 2 * kMiB, 4 * kMiB));
  // Plain host memory is no device memory.
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(buffer), buffer, 8));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(reinterpret_cast<CUdeviceptr>(buffer), 0, 8));
  // Freed memory.
  ASSERT_CU(cuMemFree(p));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(p, buffer, 8));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy(p, reinterpret_cast<CUdeviceptr>(buffer), 8));
  EXPECT_CU(cuMemAddressFree(va, kGranularity));
}

TEST_F(Copies, NullPointersAreInvalidValueAndEmptyCopiesSucceed) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(p, nullptr, 8));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(nullptr, p, 8));
  EXPECT_CU(cuMemcpyHtoD(p, nullptr, 0));
}

TEST_F(Copies, OverlappingDeviceToDeviceCopyMovesTheBytes) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 16));
  const char text[] = "abcdefgh";
  ASSERT_CU(cuMemcpyHtoD(p, text, 8));
  ASSERT_CU(cuMemcpyDtoD(p + 2, p, 6));
  EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(p), "ababcdef", 8), 0);
}

TEST_F(Memsets, EachWidthFillsItsElements) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  ASSERT_CU(cuMemsetD8(p, 0xAB, 64));
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(p)[63], 0xAB);
  ASSERT_CU(cuMemsetD16(p, 0x1234, 8));
  EXPECT_EQ(reinterpret_cast<const std::uint16_t*>(p)[7], 0x1234);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(p)[16], 0xAB);  // past the 8 elements: untouched
  ASSERT_CU(cuMemsetD32(p, 0xDEADBEEFu, 16));
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(p)[15], 0xDEADBEEFu);
  ASSERT_CU(cuMemsetD32Async(p, 5u, 1, nullptr));
  ASSERT_CU(cuMemsetD16Async(p + 4, 6, 1, CU_STREAM_PER_THREAD));
  ASSERT_CU(cuMemsetD8Async(p + 6, 7, 1, CU_STREAM_LEGACY));
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(p)[0], 5u);
  EXPECT_EQ(reinterpret_cast<const std::uint16_t*>(p)[2], 6u);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(p)[6], 7u);
}

TEST_F(Memsets, MisalignedWideMemsetsAreInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD16(p + 1, 0, 4));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(p + 2, 0, 4));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD32Async(p + 1, 0, 4, nullptr));
  EXPECT_CU(cuMemsetD16(p + 2, 0, 4));
  EXPECT_CU(cuMemsetD32(p, 0, 0));
}

TEST_F(Memsets, MemsetPastTheMappedEndIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 2 * kMiB));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(p, 1u, kMiB));  // 4 MiB into 2 MiB
}

}  // namespace
}  // namespace simtest
