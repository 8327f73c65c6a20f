// Granularity of pinned device memory, and what the VMM calls answer for sizes, addresses and
// ranges that do not respect it.
#include "fidelity.h"

namespace fidelity {
namespace {

using Granularity = DriverTest;

TEST_F(Granularity, MinimumIsAPowerOfTwoOfAtLeast64KiB) {
  // 2 MiB on H100/H200.
  EXPECT_TRUE(is_power_of_two(gran)) << gran;
  EXPECT_GE(gran, 64 * 1024u);
}

TEST_F(Granularity, RecommendedIsAMultipleOfMinimum) {
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  std::size_t recommended = 0;
  ASSERT_CU(CU(cuMemGetAllocationGranularity, &recommended, &prop,
               CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT_GE(recommended, gran);
  EXPECT_EQ(recommended % gran, 0u) << recommended;
}

TEST_F(Granularity, DeviceSupportsVirtualMemoryManagement) {
  int supported = 0;
  ASSERT_CU(CU(cuDeviceGetAttribute, &supported,
               CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  EXPECT_EQ(supported, 1);
}

TEST_F(Granularity, CreateOfSizeOffGranularityIsInvalidValue) {
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               mem_create(&h, gran / 2, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               mem_create(&h, gran + 4096, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
}

TEST_F(Granularity, CreateOfZeroBytesIsInvalidValue) {
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               mem_create(&h, 0, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
}

TEST_F(Granularity, ReserveOfSizeNotAPageMultipleIsInvalidValue) {
  // cuda.h: "The size and address parameters must be a multiple of the host page size".
  CUdeviceptr va = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, address_reserve(&va, gran + 1));
}

TEST_F(Granularity, ReserveOfPageMultipleOffGranularityIsInvalidValue) {
  // Measured (H200, driver 580.159.04): the driver insists on the allocation granularity, although
  // cuda.h only asks for a multiple of the host page size.
  CUdeviceptr va = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, address_reserve(&va, gran + gran / 2));
}

TEST_F(Granularity, MapAtAnAddressOffGranularityIsInvalidValue) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, 2 * gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va + gran / 2, gran, h));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va + 4096, gran, h));
  // Nothing was mapped by the failures.
  EXPECT_CU(mem_map(va, gran, h));
}

TEST_F(Granularity, MapOfAnythingButTheWholeHandleIsNotSupported) {
  // Measured (H200, driver 580.159.04): a mapping must cover its handle exactly, from offset 0.
  // Sizes and offsets off the granularity are refused the same way (this check comes first), so
  // NOT_SUPPORTED, not INVALID_VALUE, is what a caller sees for them.
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle small = 0, big = 0;
  ASSERT_CU(address_reserve(&va, 4 * gran));
  ASSERT_CU(mem_create(&small, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&big, 2 * gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, mem_map(va, gran, big));           // the first half
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, CU(cuMemMap, va, gran, gran, big, 0ULL));  // the second
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, CU(cuMemMap, va, gran, gran / 2, big, 0ULL));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, mem_map(va, gran / 2, big));       // off granularity
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, mem_map(va, gran / 2, small));     // off granularity
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, mem_map(va, 2 * gran, small));     // beyond the handle
  // The whole handles map.
  EXPECT_CU(mem_map(va, 2 * gran, big));
  EXPECT_CU(mem_map(va + 2 * gran, gran, small));
}

TEST_F(Granularity, MapIntoAnUnreservedAddressIsInvalidValue) {
  // An address that surely is not reserved: one whose reservation was just given back.
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(address_free(va, gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va, gran, h));
}

TEST_F(Granularity, MapOverAMappedRangeIsInvalidValue) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle a = 0, b = 0, c = 0;
  ASSERT_CU(address_reserve(&va, 3 * gran));
  ASSERT_CU(mem_create(&a, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&b, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&c, 2 * gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, a));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va, gran, a));      // the same handle again
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va, gran, b));      // another handle
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_map(va, 2 * gran, c));  // overlapping the head
  EXPECT_CU(mem_map(va + gran, 2 * gran, c));                        // right after it is free
}

TEST_F(Granularity, ReservationHonoursARequestedAlignment) {
  CUdeviceptr va = 0;
  const std::size_t align = 8 * gran;
  ASSERT_CU(address_reserve(&va, gran, align));
  EXPECT_EQ(va % align, 0u) << std::hex << va;
}

TEST_F(Granularity, CreateOnAnUnknownDeviceIsInvalidDevice) {
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE,
               mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 99)));
}

TEST_F(Granularity, HostLocationsHaveAGranularityEvenHostNumaCurrent) {
  // Measured (H200, driver 580.159.04): 2 MiB for HOST_NUMA, HOST and even HOST_NUMA_CURRENT,
  // which cuMemCreate refuses (see HostLocated.CreateAtHostNumaCurrentIsInvalidValue).
  for (auto type : {CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST,
                    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}) {
    const CUmemAllocationProp prop = pinned_prop(type, 0);
    std::size_t g = 0;
    EXPECT_CU(CU(cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))
        << " location type " << static_cast<int>(type);
    EXPECT_TRUE(is_power_of_two(g)) << g;
    EXPECT_GE(g, 4096u);
  }
}

}  // namespace
}  // namespace fidelity
