// Device queries: count, name, UUID, memory size and attributes.
#include <cstring>

#include "sim_test.h"

namespace simtest {
namespace {

using Devices = SimTest;

TEST_F(Devices, OneDeviceIsConfigured) {
  int count = 0;
  ASSERT_CU(cuDeviceGetCount(&count));
  EXPECT_EQ(count, 1);
  CUdevice dev = -1;
  ASSERT_CU(cuDeviceGet(&dev, 0));
  EXPECT_EQ(dev, 0);
}

TEST_F(Devices, UnknownOrdinalIsInvalidDevice) {
  CUdevice dev = -1;
  char name[64];
  std::size_t bytes = 0;
  int value = 0;
  CUuuid uuid{};
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&dev, 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&dev, -1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetName(name, sizeof(name), 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceTotalMem(&bytes, 7));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetUuid(&uuid, 3));
}

TEST_F(Devices, NameSaysSimulatedAndIsTruncatedToTheBuffer) {
  char name[64];
  ASSERT_CU(cuDeviceGetName(name, sizeof(name), 0));
  EXPECT_STREQ(name, "uvmpool simulated device 0");
  char small[8];
  std::memset(small, 'x', sizeof(small));
  ASSERT_CU(cuDeviceGetName(small, sizeof(small), 0));
  EXPECT_STREQ(small, "uvmpool");
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(name, 0, 0));
}

TEST_F(Devices, TotalMemIsTheConfiguredDeviceMemory) {
  std::size_t bytes = 0;
  ASSERT_CU(cuDeviceTotalMem(&bytes, 0));
  EXPECT_EQ(bytes, kDeviceMemory);
}

TEST_F(Devices, UuidIsStableAndNotZero) {
  CUuuid a{}, b{}, zero{};
  ASSERT_CU(cuDeviceGetUuid(&a, 0));
  ASSERT_CU(cuDeviceGetUuid(&b, 0));
  EXPECT_EQ(std::memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
  EXPECT_NE(std::memcmp(a.bytes, zero.bytes, sizeof(a.bytes)), 0);
}

TEST_F(Devices, AttributesDescribeAnH100WithVirtualMemoryManagement) {
  const std::pair<CUdevice_attribute, int> expected[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
      {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0},
      {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
      {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
  };
  for (const auto& [attribute, value] : expected) {
    int got = -12345;
    ASSERT_CU(cuDeviceGetAttribute(&got, attribute, 0));
    EXPECT_EQ(got, value) << "attribute " << static_cast<int>(attribute);
  }
}

TEST_F(Devices, EveryAttributeOfCudaHIsAnswered) {
  for (int attribute = 1; attribute < CU_DEVICE_ATTRIBUTE_MAX; ++attribute) {
    int value = 0;
    EXPECT_CU(cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(attribute), 0))
        << " attribute " << attribute;
  }
}

TEST_F(Devices, UnknownAttributeIsInvalidValue) {
  int value = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(0), 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(9999), 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
}

}  // namespace
}  // namespace simtest
