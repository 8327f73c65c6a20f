// Device-located virtual memory management: granularity, reservations, handles, mappings, access.
#include <sys/mman.h>

#include <cstring>

#include "sim_test.h"

namespace simtest {
namespace {

using Vmm = SimTest;

const CUmemAllocationProp kDevice0 = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
const CUmemAccessDesc kReadWrite0 = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);

TEST_F(Vmm, GranularityIsTheConfiguredOneForEveryLocation) {
  for (auto type : {CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}) {
    const CUmemAllocationProp prop = pinned_prop(type, 0);
    for (auto option : {CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED}) {
      std::size_t granularity = 0;
      ASSERT_CU(cuMemGetAllocationGranularity(&granularity, &prop, option)) << " location " << type;
      EXPECT_EQ(granularity, kGranularity);
    }
  }
}

TEST_F(Vmm, GranularityOfBadPropertiesIsAnError) {
  std::size_t granularity = 0;
  CUmemAllocationProp prop = kDevice0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               cuMemGetAllocationGranularity(&granularity, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               cuMemGetAllocationGranularity(&granularity, &prop, static_cast<CUmemAllocationGranularity_flags>(7)));
  prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_INVALID, 0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 3);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

TEST_F(Vmm, ReserveNeedsAGranularSizeAndAPowerOfTwoAlignment) {
  CUdeviceptr va = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, 0, 0, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, kGranularity + 1, 0, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, kGranularity + 4096, 0, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, kGranularity, 3 * kGranularity, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&va, kGranularity, 0, 0, 1));
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 16 * kGranularity, 0, 0));
  EXPECT_EQ(va % (16 * kGranularity), 0u);
  EXPECT_CU(cuMemAddressFree(va, kGranularity));
}

TEST_F(Vmm, ReserveHonoursAFreeHintAndReservationsNeverOverlap) {
  CUdeviceptr first = 0, hinted = 0, again = 0;
  ASSERT_CU(cuMemAddressReserve(&first, 4 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemAddressFree(first, 4 * kGranularity));
  ASSERT_CU(cuMemAddressReserve(&hinted, kGranularity, 0, first + kGranularity, 0));
  EXPECT_EQ(hinted, first + kGranularity);
  ASSERT_CU(cuMemAddressReserve(&again, kGranularity, 0, first + kGranularity, 0));  // taken: elsewhere
  EXPECT_NE(again, hinted);
  EXPECT_TRUE(again + kGranularity <= hinted || again >= hinted + kGranularity);
}

TEST_F(Vmm, AddressFreeMustMatchAnUnmappedReservation) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, kGranularity));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va + kGranularity, kGranularity));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, 2 * kGranularity));  // still mapped
  ASSERT_CU(cuMemUnmap(va, kGranularity));
  EXPECT_CU(cuMemAddressFree(va, 2 * kGranularity));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, 2 * kGranularity));
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(Vmm, CreateChecksSizeLocationHandleTypesAndFlags) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = kDevice0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, 0, &prop, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranularity / 2, &prop, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranularity, &prop, 1));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 1);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuMemCreate(&h, kGranularity, &prop, 0));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranularity, &prop, 0));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 1);  // the sim has one NUMA node
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranularity, &prop, 0));
  prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // HOST is not IPC capable
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, kGranularity, &prop, 0));
  prop = kDevice0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemCreate(&h, kGranularity, &prop, 0));
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  ASSERT_CU(cuMemCreate(&h, kGranularity, &prop, 0));
  CUmemAllocationProp got{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_CU(cuMemRelease(h));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemRelease(h));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationPropertiesFromHandle(&got, h));
}

TEST_F(Vmm, CreateBeyondTheDeviceIsOutOfMemoryAndMemoryReturnsOnlyWhenReleasedAndUnmapped) {
  const std::size_t before = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h, kDeviceMemory, &kDevice0, 0));  // the context took some
  EXPECT_EQ(free_bytes(), before);
  CUdeviceptr va = 0;
  ASSERT_CU(make_vmm(8 * kGranularity, kDevice0, &va, &h));
  EXPECT_EQ(free_bytes(), before - 8 * kGranularity);
  ASSERT_CU(cuMemRelease(h));
  EXPECT_EQ(free_bytes(), before - 8 * kGranularity) << "a mapping holds its memory";
  ASSERT_CU(cuMemUnmap(va, 8 * kGranularity));
  EXPECT_EQ(free_bytes(), before);
  EXPECT_CU(cuMemAddressFree(va, 8 * kGranularity));
}

TEST_F(Vmm, OneHandleMappedTwiceShowsTheSameBytes) {
  CUdeviceptr a = 0, b = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&a, kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&b, kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(a, kGranularity, 0, h, 0));
  ASSERT_CU(cuMemMap(b, kGranularity, 0, h, 0));
  ASSERT_CU(cuMemSetAccess(a, kGranularity, &kReadWrite0, 1));
  ASSERT_CU(cuMemSetAccess(b, kGranularity, &kReadWrite0, 1));
  ASSERT_CU(cuMemsetD32(a + 4096, 0xCAFEF00Du, 16));
  std::uint32_t seen = 0;
  ASSERT_CU(cuMemcpyDtoH(&seen, b + 4096 + 60, 4));
  EXPECT_EQ(seen, 0xCAFEF00Du);
  reinterpret_cast<volatile char*>(b)[7] = 'x';  // the host writes through one address...
  EXPECT_EQ(reinterpret_cast<volatile char*>(a)[7], 'x');  // ...and reads through the other
}

TEST_F(Vmm, MappedRangeIsInaccessibleUntilSetAccess) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  unsigned long long flags = 99;
  const CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_CU(cuMemGetAccess(&flags, &device0, va));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(va, 1, 16));
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &kReadWrite0, 1));
  ASSERT_CU(cuMemGetAccess(&flags, &device0, va + 100));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  EXPECT_CU(cuMemsetD8(va, 1, 16));
}

TEST_F(Vmm, ReadOnlyAccessRefusesWritesAndAllowsReads) {
  CUdeviceptr va = 0, scratch = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(make_vmm(kGranularity, kDevice0, &va, &h));
  ASSERT_CU(cuMemsetD8(va, 3, 64));
  const CUmemAccessDesc read_only = access(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &read_only, 1));
  ASSERT_CU(cuMemAlloc(&scratch, 64));
  EXPECT_CU(cuMemcpyDtoD(scratch, va, 64));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(va, scratch, 64));
}

TEST_F(Vmm, TouchingAnUnmappedReservedAddressFromTheHostFaults) {
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, kGranularity, 0, 0, 0));
  EXPECT_DEATH(reinterpret_cast<volatile char*>(va)[0] = 1, "");
}

TEST_F(Vmm, MapCoversWholeHandlesInsideAReservation) {
  CUdeviceptr va = 0, gone = 0;
  CUmemGenericAllocationHandle big = 0, small = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&big, 2 * kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemCreate(&small, kGranularity, &kDevice0, 0));
  // Part of a handle, an offset, a size beyond the handle: not supported (measured on an H200).
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(va, kGranularity, 0, big, 0));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(va, kGranularity, kGranularity, big, 0));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(va, 2 * kGranularity, 0, small, 0));
  // Addresses off the granularity, outside a reservation, or over a mapping: invalid.
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 4096, kGranularity, 0, small, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 3 * kGranularity, 2 * kGranularity, 0, big, 0));
  ASSERT_CU(cuMemAddressReserve(&gone, kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemAddressFree(gone, kGranularity));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(gone, kGranularity, 0, small, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, kGranularity, 0, 12345, 0));  // no such handle
  ASSERT_CU(cuMemMap(va + kGranularity, 2 * kGranularity, 0, big, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * kGranularity, kGranularity, 0, small, 0));
  EXPECT_CU(cuMemMap(va, kGranularity, 0, small, 0));
}

TEST_F(Vmm, UnmapMayNotCutAMappingButMaySpanHoles) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, 2 * kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(va + kGranularity, 2 * kGranularity, 0, h, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va + kGranularity, kGranularity));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va + 2 * kGranularity, kGranularity));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va, 8 * kGranularity));  // beyond the reservation
  ASSERT_CU(cuMemUnmap(va, 4 * kGranularity));                                 // holes are fine
  CUdeviceptr base = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, nullptr, va + kGranularity));
  EXPECT_CU(cuMemUnmap(va, kGranularity));  // nothing mapped: nothing to do
  EXPECT_CU(cuMemMap(va + kGranularity, 2 * kGranularity, 0, h, 0));
}

TEST_F(Vmm, AddressRangeIsTheOneMappedPiece) {
  CUdeviceptr va = 0, base = 0;
  std::size_t size = 0;
  CUmemGenericAllocationHandle a = 0, b = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&a, kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemCreate(&b, 2 * kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, a, 0));
  ASSERT_CU(cuMemMap(va + kGranularity, 2 * kGranularity, 0, b, 0));
  ASSERT_CU(cuMemSetAccess(va, 3 * kGranularity, &kReadWrite0, 1));  // one call over both
  ASSERT_CU(cuMemGetAddressRange(&base, &size, va + 2 * kGranularity + 5));
  EXPECT_EQ(base, va + kGranularity);
  EXPECT_EQ(size, 2 * kGranularity);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, va + 3 * kGranularity));
  // A copy across the two pieces works: they are one contiguous range.
  EXPECT_CU(cuMemsetD32(va + kGranularity - 64, 1u, 32));
}

TEST_F(Vmm, SetAccessNeedsAFullyMappedRangeAndValidDescriptors) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&h, kGranularity, &kDevice0, 0));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, 2 * kGranularity, &kReadWrite0, 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, kGranularity, &kReadWrite0, 0));
  const CUmemAccessDesc bad_flags = access(CU_MEM_LOCATION_TYPE_DEVICE, 0, static_cast<CUmemAccess_flags>(2));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, kGranularity, &bad_flags, 1));
  const CUmemAccessDesc bad_device = access(CU_MEM_LOCATION_TYPE_DEVICE, 4);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuMemSetAccess(va, kGranularity, &bad_device, 1));
  const CUmemAccessDesc numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);  // device memory: refused
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, kGranularity, &numa, 1));
  EXPECT_CU(cuMemSetAccess(va, kGranularity, &kReadWrite0, 1));
}

TEST_F(Vmm, RetainFromAnInteriorAddressReturnsTheHandleAndAddsAReference) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0, retained = 0;
  ASSERT_CU(make_vmm(2 * kGranularity, kDevice0, &va, &h));
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + kGranularity + 3)));
  EXPECT_EQ(retained, h);
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemUnmap(va, 2 * kGranularity));
  // The retained reference keeps the handle alive: it maps again, with its contents.
  EXPECT_CU(cuMemMap(va, 2 * kGranularity, 0, retained, 0));
  EXPECT_CU(cuMemRelease(retained));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va - 1)));
}

TEST_F(Vmm, UnmapThenRemapKeepsTheContentsAndNeedsAccessAgain) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(make_vmm(kGranularity, kDevice0, &va, &h));
  ASSERT_CU(cuMemsetD32(va, 0x600DF00Du, 4));
  ASSERT_CU(cuMemUnmap(va, kGranularity));
  ASSERT_CU(cuMemMap(va, kGranularity, 0, h, 0));
  std::uint32_t word = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(&word, va, 4));
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &kReadWrite0, 1));
  ASSERT_CU(cuMemcpyDtoH(&word, va + 12, 4));
  EXPECT_EQ(word, 0x600DF00Du);
}

}  // namespace
}  // namespace simtest
