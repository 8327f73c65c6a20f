// Host-located VMM memory (CU_MEM_LOCATION_TYPE_HOST_NUMA and CU_MEM_LOCATION_TYPE_HOST): made with
// cuMemCreate, touched by the device through copies and memsets, and by the CPU directly when the
// host was granted access.
#include "fidelity.h"

#include <cstring>

namespace fidelity {
namespace {

class HostLocated : public DriverTest {
 protected:
  // The device attribute that says whether `type` works with cuMemCreate/cuMemMap.
  bool supported(CUmemLocationType type) {
    const auto attr = type == CU_MEM_LOCATION_TYPE_HOST_NUMA
                          ? CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
                          : CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
    int value = 0;
    return CU(cuDeviceGetAttribute, &value, attr, dev) == CUDA_SUCCESS && value == 1;
  }

  // The host location an access descriptor names for memory of `type`: host-NUMA memory is
  // granted to the CPU as HOST_NUMA (cuda.h: HOST_NUMA access only for HOST_NUMA allocations).
  static CUmemAccessDesc host_access(CUmemLocationType type) { return access_desc(type, 0); }

  // Reserve, create at `type` (id 0), map, and grant the device (and the CPU if `cpu`).
  CUresult make(CUmemLocationType type, bool cpu, CUdeviceptr* va, std::size_t* bytes) {
    const CUmemAllocationProp prop = pinned_prop(type, 0);
    std::size_t g = 0;
    CUresult r = CU(cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return r;
    *bytes = g;
    CUmemGenericAllocationHandle h = 0;
    if ((r = address_reserve(va, g)) != CUDA_SUCCESS) return r;
    if ((r = mem_create(&h, g, prop)) != CUDA_SUCCESS) return r;
    if ((r = mem_map(*va, g, h)) != CUDA_SUCCESS) return r;
    const CUmemAccessDesc desc[2] = {access_desc(CU_MEM_LOCATION_TYPE_DEVICE, static_cast<int>(dev)),
                                     host_access(type)};
    return CU(cuMemSetAccess, *va, g, desc, std::size_t{cpu ? 2u : 1u});
  }

  void device_and_cpu_see_the_same_bytes(CUmemLocationType type) {
    CUdeviceptr va = 0;
    std::size_t bytes = 0;
    ASSERT_CU(make(type, /*cpu=*/true, &va, &bytes));
    ASSERT_GT(bytes, 0u);
    EXPECT_EQ(bytes % 4096, 0u);
    const std::size_t n = bytes / sizeof(std::uint32_t);
    auto* cpu = reinterpret_cast<volatile std::uint32_t*>(va);

    // The device writes, the CPU reads through the same address.
    ASSERT_CU(CU(cuMemsetD32_v2, va, 0x600DCAFEu, n));
    ASSERT_CU(CU(cuCtxSynchronize));
    EXPECT_EQ(cpu[0], 0x600DCAFEu);
    EXPECT_EQ(cpu[n - 1], 0x600DCAFEu);

    // The CPU writes, the device copies it to device memory, the host reads that back.
    const auto words = pattern(n, 7);
    for (std::size_t i = 0; i < n; ++i) cpu[i] = words[i];
    CUdeviceptr dmem = 0;
    ASSERT_CU(mem_alloc(&dmem, bytes));
    ASSERT_CU(CU(cuMemcpyDtoD_v2, dmem, va, bytes));
    EXPECT_EQ(read_words(dmem, n), words);

    // Device memory copied into host-located memory by the device, read by the CPU.
    ASSERT_CU(CU(cuMemsetD32_v2, dmem, 0x0BADF00Du, n));
    ASSERT_CU(CU(cuMemcpyDtoD_v2, va, dmem, bytes));
    ASSERT_CU(CU(cuCtxSynchronize));
    EXPECT_EQ(cpu[n / 2], 0x0BADF00Du);
    EXPECT_EQ(read_words(va, 4), std::vector<std::uint32_t>(4, 0x0BADF00Du));
  }

  void device_only_access_works(CUmemLocationType type) {
    CUdeviceptr va = 0;
    std::size_t bytes = 0;
    ASSERT_CU(make(type, /*cpu=*/false, &va, &bytes));
    const std::size_t n = bytes / sizeof(std::uint32_t);
    const auto words = pattern(n, 8);
    ASSERT_CU(write_words(va, words));
    EXPECT_EQ(read_words(va, n), words);
    ASSERT_CU(CU(cuMemsetD32_v2, va + 64, 5u, std::size_t{16}));
    EXPECT_EQ(read_words(va + 64, 16), std::vector<std::uint32_t>(16, 5u));
  }
};

TEST_F(HostLocated, HostNumaMemoryIsSharedByDeviceAndCpu) {
  if (!supported(CU_MEM_LOCATION_TYPE_HOST_NUMA))
    GTEST_SKIP() << "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  device_and_cpu_see_the_same_bytes(CU_MEM_LOCATION_TYPE_HOST_NUMA);
}

TEST_F(HostLocated, HostMemoryIsSharedByDeviceAndCpu) {
  if (!supported(CU_MEM_LOCATION_TYPE_HOST))
    GTEST_SKIP() << "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  device_and_cpu_see_the_same_bytes(CU_MEM_LOCATION_TYPE_HOST);
}

TEST_F(HostLocated, HostNumaMemoryWithDeviceAccessOnlyWorksForTheDevice) {
  if (!supported(CU_MEM_LOCATION_TYPE_HOST_NUMA))
    GTEST_SKIP() << "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  device_only_access_works(CU_MEM_LOCATION_TYPE_HOST_NUMA);
}

TEST_F(HostLocated, HostMemoryWithDeviceAccessOnlyWorksForTheDevice) {
  if (!supported(CU_MEM_LOCATION_TYPE_HOST))
    GTEST_SKIP() << "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  device_only_access_works(CU_MEM_LOCATION_TYPE_HOST);
}

TEST_F(HostLocated, HostNumaPropertiesEchoTheLocation) {
  if (!supported(CU_MEM_LOCATION_TYPE_HOST_NUMA))
    GTEST_SKIP() << "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  std::size_t g = 0;
  ASSERT_CU(CU(cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_TRUE(is_power_of_two(g)) << g;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(mem_create(&h, g, prop));
  CUmemAllocationProp got{};
  ASSERT_CU(CU(cuMemGetAllocationPropertiesFromHandle, &got, h));
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(got.location.id, 0);
}

TEST_F(HostLocated, CreateAtHostNumaCurrentIsInvalidValue) {
  // Measured on an H200 (driver 580); cuda.h says the same.
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0)));
}

TEST_F(HostLocated, HostMemoryWithAnIpcHandleTypeIsInvalidValue) {
  // cuda.h: HOST allocations are not IPC capable; requestedHandleTypes must be 0.
  if (!supported(CU_MEM_LOCATION_TYPE_HOST))
    GTEST_SKIP() << "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
  CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_HOST, 0);
  std::size_t g = 0;
  ASSERT_CU(CU(cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_create(&h, g, prop));
}

}  // namespace
}  // namespace fidelity
