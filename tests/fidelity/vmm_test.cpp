// Device-located VMM memory: one handle seen at two addresses, access flags, handle references.
#include "fidelity.h"

namespace fidelity {
namespace {

using VmmSharing = DriverTest;
using VmmHandles = DriverTest;

TEST_F(VmmSharing, OneHandleMappedTwiceShowsTheSameBytesAtBothAddresses) {
  CUdeviceptr a = 0, b = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&a, gran));
  ASSERT_CU(address_reserve(&b, gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(a, gran, h));
  ASSERT_CU(mem_map(b, gran, h));
  ASSERT_CU(grant_device(a, gran));
  ASSERT_CU(grant_device(b, gran));

  const std::size_t n = gran / sizeof(std::uint32_t);
  const auto words = pattern(n, 1);
  ASSERT_CU(write_words(a, words));
  EXPECT_EQ(read_words(b, n), words) << "written through the first address, read through the second";

  ASSERT_CU(CU(cuMemsetD32_v2, b + 4096, 0xA5A5F00Du, std::size_t{1024}));
  const auto seen = read_words(a + 4096, 1024);
  EXPECT_EQ(seen, std::vector<std::uint32_t>(1024, 0xA5A5F00Du)) << "memset through the second";
}

TEST_F(VmmSharing, DeviceToDeviceCopyBetweenTwoMappingsOfOneHandle) {
  CUdeviceptr a = 0, b = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&a, gran));
  ASSERT_CU(address_reserve(&b, gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(a, gran, h));
  ASSERT_CU(mem_map(b, gran, h));
  ASSERT_CU(grant_device(a, gran));
  ASSERT_CU(grant_device(b, gran));

  const std::size_t half = gran / 2, n = half / sizeof(std::uint32_t);
  const auto words = pattern(n, 2);
  ASSERT_CU(write_words(a, words));
  ASSERT_CU(CU(cuMemcpyDtoD_v2, b + half, a, half));  // first half -> second half, across aliases
  EXPECT_EQ(read_words(a + half, n), words);
  EXPECT_EQ(read_words(b + half, n), words);
}

TEST_F(VmmSharing, MappingsOfTwoHandlesInOneReservationAreOneContiguousRange) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_CU(address_reserve(&va, 2 * gran));
  ASSERT_CU(mem_create(&h1, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_create(&h2, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h1));
  ASSERT_CU(mem_map(va + gran, gran, h2));
  ASSERT_CU(grant_device(va, 2 * gran));  // one call over both mappings

  // A copy and a memset that straddle the boundary between the two handles.
  const std::size_t n = 1024;
  const CUdeviceptr straddle = va + gran - n * sizeof(std::uint32_t) / 2;
  const auto words = pattern(n, 3);
  ASSERT_CU(write_words(straddle, words));
  EXPECT_EQ(read_words(straddle, n), words);
  ASSERT_CU(CU(cuMemsetD32_v2, straddle, 7u, n));
  EXPECT_EQ(read_words(straddle, n), std::vector<std::uint32_t>(n, 7u));
}

TEST_F(VmmSharing, GetAccessReportsWhatSetAccessGranted) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  const CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, static_cast<int>(dev)};
  unsigned long long flags = 0;
  ASSERT_CU(CU(cuMemGetAccess, &flags, &loc, va + gran / 2));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
}

TEST_F(VmmSharing, NewMappingHasNoAccessUntilSetAccess) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h));
  const CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, static_cast<int>(dev)};
  unsigned long long flags = 99;
  ASSERT_CU(CU(cuMemGetAccess, &flags, &loc, va));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
}

TEST_F(VmmHandles, RetainOnAnInteriorAddressReturnsTheMappedHandle) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0, retained = 0;
  ASSERT_CU(vmm_device(&va, &h, 2 * gran));
  ASSERT_CU(CU(cuMemRetainAllocationHandle, &retained, reinterpret_cast<void*>(va + gran + 123)));
  track_handle(retained);
  // cuda.h: "guaranteed to be the same handle value used to map the memory".
  EXPECT_EQ(retained, h);
  CUmemAllocationProp prop{};
  ASSERT_CU(CU(cuMemGetAllocationPropertiesFromHandle, &prop, retained));
  EXPECT_EQ(prop.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(prop.location.id, static_cast<int>(dev));
}

TEST_F(VmmHandles, ReleasingTheRetainedReferenceKeepsTheMapping) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0, retained = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  const std::size_t n = 4096;
  const auto words = pattern(n, 4);
  ASSERT_CU(write_words(va, words));
  ASSERT_CU(CU(cuMemRetainAllocationHandle, &retained, reinterpret_cast<void*>(va + 8)));
  track_handle(retained);
  ASSERT_CU(mem_release(retained));
  EXPECT_EQ(read_words(va, n), words);
  ASSERT_CU(CU(cuMemsetD32_v2, va, 9u, n));
  EXPECT_EQ(read_words(va, n), std::vector<std::uint32_t>(n, 9u));
}

TEST_F(VmmHandles, ReleasingTheLastHandleWhileMappedKeepsTheMemoryUntilUnmap) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  const std::size_t n = 4096;
  const auto words = pattern(n, 5);
  ASSERT_CU(write_words(va, words));
  ASSERT_CU(mem_release(h));  // the mapping still holds the memory
  EXPECT_EQ(read_words(va, n), words);
  ASSERT_CU(CU(cuMemsetD32_v2, va, 11u, n));
  EXPECT_EQ(read_words(va, n), std::vector<std::uint32_t>(n, 11u));
  ASSERT_CU(mem_unmap(va, gran));  // frees the memory (a released handle is never used again)
}

TEST_F(VmmHandles, PropertiesFromHandleEchoTheCreateProperties) {
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  CUmemAllocationProp prop{};
  ASSERT_CU(CU(cuMemGetAllocationPropertiesFromHandle, &prop, h));
  EXPECT_EQ(prop.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_NONE);
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(prop.location.id, 0);
}

TEST_F(VmmHandles, UnmapThenRemapTheSameHandleKeepsItsContents) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  const std::size_t n = 4096;
  const auto words = pattern(n, 6);
  ASSERT_CU(write_words(va, words));
  ASSERT_CU(mem_unmap(va, gran));
  ASSERT_CU(mem_map(va, gran, h));
  ASSERT_CU(grant_device(va, gran));  // "all mappings start with no accessibility setup"
  EXPECT_EQ(read_words(va, n), words);
}

}  // namespace
}  // namespace fidelity
