// cuMemAlloc/cuMemCreate accounting, out-of-memory answers, and cuMemGetAddressRange.
#include "fidelity.h"

namespace fidelity {
namespace {

// Others may allocate on a shared real GPU: free memory is compared within this much, and only in
// the direction that would show a leak.
constexpr std::size_t kTolerance = 64 * kMiB;

using OutOfMemory = DriverTest;
using MemoryAccounting = DriverTest;
using AddressRange = DriverTest;

TEST_F(OutOfMemory, AllocOfTwiceTheDeviceMemoryIsOutOfMemoryAndLeaksNothing) {
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, mem_alloc(&p, 2 * total));
  EXPECT_GE(free_bytes() + kTolerance, before);
  // The failure leaves the driver usable.
  ASSERT_CU(mem_alloc(&p, kMiB));
  ASSERT_CU(CU(cuMemsetD32_v2, p, 1u, kMiB / 4));
  EXPECT_EQ(read_words(p, 4), std::vector<std::uint32_t>(4, 1u));
}

TEST_F(OutOfMemory, CreateOfMoreThanTheDeviceMemoryIsOutOfMemoryAndLeaksNothing) {
  const std::size_t before = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY,
               mem_create(&h, round_up(total, gran) + gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_GE(free_bytes() + kTolerance, before);
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
}

TEST_F(MemoryAccounting, GetInfoTotalEqualsDeviceTotalMemAndFreeIsBelowIt) {
  std::size_t free = 0, tot = 0;
  ASSERT_CU(CU(cuMemGetInfo_v2, &free, &tot));
  EXPECT_EQ(tot, total);
  EXPECT_GT(free, 0u);
  EXPECT_LT(free, tot);  // the context itself takes some
}

TEST_F(MemoryAccounting, AllocLowersFreeMemoryByItsSizeAndFreeGivesItBack) {
  const std::size_t size = 256 * kMiB;
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, size));
  const std::size_t during = free_bytes();
  EXPECT_GE(before + kTolerance, during + size) << "free dropped by less than the allocation";
  EXPECT_LE(before, during + size + kTolerance) << "free dropped by much more than the allocation";
  ASSERT_CU(mem_free(p));
  EXPECT_GE(free_bytes() + kTolerance, before);
}

TEST_F(MemoryAccounting, CreateLowersFreeMemoryByItsSizeAndReleaseGivesItBack) {
  const std::size_t size = round_up(256 * kMiB, gran);
  const std::size_t before = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(mem_create(&h, size, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  const std::size_t during = free_bytes();
  EXPECT_GE(before + kTolerance, during + size) << "an unmapped handle still holds its memory";
  EXPECT_LE(before, during + size + kTolerance);
  ASSERT_CU(mem_release(h));
  EXPECT_GE(free_bytes() + kTolerance, before);
}

TEST_F(MemoryAccounting, MappedMemoryIsFreedByUnmapAfterItsHandleWasReleased) {
  const std::size_t size = round_up(256 * kMiB, gran);
  const std::size_t before = free_bytes();
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, size));
  ASSERT_CU(mem_release(h));
  EXPECT_GE(before + kTolerance, free_bytes() + size) << "the mapping no longer holds its memory";
  ASSERT_CU(mem_unmap(va, size));
  EXPECT_GE(free_bytes() + kTolerance, before);
}

TEST_F(AddressRange, InteriorPointerOfAnAllocGivesItsBaseAndSize) {
  const std::size_t size = 2 * gran;
  CUdeviceptr p = 0, base = 0;
  std::size_t got = 0;
  ASSERT_CU(mem_alloc(&p, size));
  ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, &got, p + size / 2 + 3));
  EXPECT_EQ(base, p);
  EXPECT_EQ(got, size);
  ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, &got, p + size - 1));  // the last byte
  EXPECT_EQ(base, p);
  // Both outputs are optional.
  ASSERT_CU(CU(cuMemGetAddressRange_v2, nullptr, &got, p));
  EXPECT_EQ(got, size);
  base = 0;
  ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, nullptr, p + 1));
  EXPECT_EQ(base, p);
}

TEST_F(AddressRange, SizeIsTheSizeAskedForNotARoundedOne) {
  // Measured (H200, driver 580.159.04): 1 B -> 1, 3 MiB + 5 B -> 3145733.
  for (std::size_t size : {std::size_t{1}, std::size_t{1000}, 3 * kMiB + 5}) {
    CUdeviceptr p = 0, base = 0;
    std::size_t got = 0;
    ASSERT_CU(mem_alloc(&p, size));
    ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, &got, p + size - 1));
    EXPECT_EQ(base, p);
    EXPECT_EQ(got, size);
  }
}

TEST_F(AddressRange, VmmRangeAnswersTheMappedPieceNotTheReservation) {
  CUdeviceptr va = 0, base = 0;
  std::size_t got = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_CU(address_reserve(&va, 4 * gran));
  ASSERT_CU(mem_create(&h1, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&h2, 2 * gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h1));
  ASSERT_CU(mem_map(va + gran, 2 * gran, h2));
  ASSERT_CU(grant_device(va, 3 * gran));

  ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, &got, va + 100));
  EXPECT_EQ(base, va);
  EXPECT_EQ(got, gran);
  ASSERT_CU(CU(cuMemGetAddressRange_v2, &base, &got, va + 2 * gran + 100));
  EXPECT_EQ(base, va + gran);
  EXPECT_EQ(got, 2 * gran);
}

TEST_F(AddressRange, UnknownAddressIsNotFound) {
  CUdeviceptr va = 0, base = 0;
  std::size_t got = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(address_free(va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange_v2, &base, &got, va + 64));
}

TEST_F(AddressRange, ReservedButUnmappedAddressIsNotFound) {
  CUdeviceptr va = 0, base = 0;
  std::size_t got = 0;
  ASSERT_CU(address_reserve(&va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange_v2, &base, &got, va + 64));
}

TEST_F(AddressRange, FreedAllocIsNotFound) {
  CUdeviceptr p = 0, base = 0;
  std::size_t got = 0;
  ASSERT_CU(mem_alloc(&p, gran));
  ASSERT_CU(mem_free(p));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange_v2, &base, &got, p));
}

TEST_F(AddressRange, PlainHostMemoryIsNotFound) {
  std::vector<char> plain(4096);
  CUdeviceptr base = 0;
  std::size_t got = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND,
               CU(cuMemGetAddressRange_v2, &base, &got, reinterpret_cast<CUdeviceptr>(plain.data())));
}

// A CUDA array as the copies between it and device memory see it (cuMemcpyDtoA / AtoD, which uvmpool
// hooks): bytes go in at an offset and come back out, and a range past its end is refused.
using Arrays = DriverTest;
TEST_F(Arrays, BytesCopiedIntoAnArrayAtAnOffsetComeBackOut) {
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 4096;
  desc.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  desc.NumChannels = 1;  // 16 KiB
  CUarray array = nullptr;
  ASSERT_CU(CU(cuArrayCreate_v2, &array, &desc));
  CUdeviceptr src = 0, dst = 0;
  ASSERT_CU(mem_alloc(&src, 8192));
  ASSERT_CU(mem_alloc(&dst, 8192));
  const std::vector<std::uint32_t> words = pattern(2048, 17);
  ASSERT_CU(write_words(src, words));
  EXPECT_CU(CU(cuMemcpyDtoA_v2, array, std::size_t{4096}, src, std::size_t{8192}));
  EXPECT_CU(CU(cuMemcpyAtoD_v2, dst, array, std::size_t{4096}, std::size_t{8192}));
  EXPECT_EQ(read_words(dst, 2048), words);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpyDtoA_v2, array, std::size_t{12288}, src, std::size_t{8192}));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpyAtoD_v2, dst, array, std::size_t{12288}, std::size_t{8192}));
  EXPECT_CU(CU(cuArrayDestroy, array));
}

}  // namespace
}  // namespace fidelity
