// Host-located VMM memory (CU_MEM_LOCATION_TYPE_HOST_NUMA / HOST): charged to the host's capacity,
// usable through copies and memsets, and by the CPU directly once access is set.
#include "sim_test.h"

namespace simtest {
namespace {

using HostVmm = SimTest;

class HostLocations : public SimTest, public ::testing::WithParamInterface<CUmemLocationType> {};

TEST_P(HostLocations, HandleIsUsableThroughCopiesMemsetsAndTheHost) {
  const CUmemAllocationProp prop = pinned_prop(GetParam(), 0);
  const std::size_t device_free = free_bytes();
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(make_vmm(kGranularity, prop, &va, &h));
  const CUmemAccessDesc host = access(GetParam(), 0);
  ASSERT_CU(cuMemSetAccess(va, kGranularity, &host, 1));
  EXPECT_EQ(free_bytes(), device_free) << "host-located memory is not device memory";

  const std::size_t n = kGranularity / sizeof(std::uint32_t);
  auto* cpu = reinterpret_cast<volatile std::uint32_t*>(va);
  ASSERT_CU(cuMemsetD32(va, 0x600DCAFEu, n));  // the device writes, the CPU reads
  EXPECT_EQ(cpu[0], 0x600DCAFEu);
  EXPECT_EQ(cpu[n - 1], 0x600DCAFEu);
  cpu[5] = 0x12345678u;  // the CPU writes, the device copies it out
  CUdeviceptr dmem = 0;
  ASSERT_CU(cuMemAlloc(&dmem, kGranularity));
  ASSERT_CU(cuMemcpyDtoD(dmem, va, kGranularity));
  std::uint32_t word = 0;
  ASSERT_CU(cuMemcpyDtoH(&word, dmem + 5 * sizeof(std::uint32_t), sizeof(word)));
  EXPECT_EQ(word, 0x12345678u);

  CUmemAllocationProp got{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  EXPECT_EQ(got.location.type, GetParam());
  ASSERT_CU(cuMemUnmap(va, kGranularity));
  ASSERT_CU(cuMemRelease(h));
  EXPECT_CU(cuMemAddressFree(va, kGranularity));
}

INSTANTIATE_TEST_SUITE_P(HostVmm, HostLocations,
                         ::testing::Values(CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST),
                         [](const auto& info) { return info.param == CU_MEM_LOCATION_TYPE_HOST ? "Host" : "HostNuma"; });

TEST_F(HostVmm, HandlesBeyondTheHostMemoryAreOutOfMemoryAndReleaseGivesItBack) {
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  CUmemGenericAllocationHandle whole = 0, more = 0;
  ASSERT_CU(cuMemCreate(&whole, kHostMemory, &prop, 0));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&more, kGranularity, &prop, 0));
  void* pinned = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemHostAlloc(&pinned, 4096, 0));  // one budget for both
  ASSERT_CU(cuMemRelease(whole));
  EXPECT_CU(cuMemCreate(&more, kGranularity, &prop, 0));
  EXPECT_CU(cuMemRelease(more));
}

TEST_F(HostVmm, DeviceAccessAloneAlsoWorksForTheDevice) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(make_vmm(kGranularity, pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0), &va, &h));
  ASSERT_CU(cuMemsetD32(va + 64, 5u, 16));
  std::uint32_t words[16] = {};
  ASSERT_CU(cuMemcpyDtoH(words, va + 64, sizeof(words)));
  EXPECT_EQ(words[15], 5u);
  const CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  unsigned long long flags = 99;
  ASSERT_CU(cuMemGetAccess(&flags, &host, va));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
}

}  // namespace
}  // namespace simtest
