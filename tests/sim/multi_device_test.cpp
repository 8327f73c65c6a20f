// Several simulated devices, from UVMPOOL_SIM_DEVICES=3 (and 128 MiB each) in the environment that
// CTest sets for this executable.
#include <cstring>

#include "ctest_registration.h"
#include "sim_test.h"

namespace simtest {
namespace {

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_CU(cuInit(0)); }
};

TEST_F(MultiDevice, CountComesFromUvmpoolSimDevices) {
  int count = 0;
  ASSERT_CU(cuDeviceGetCount(&count));
  EXPECT_EQ(count, 3);
  CUdevice dev = -1;
  EXPECT_CU(cuDeviceGet(&dev, 2));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&dev, 3));
}

TEST_F(MultiDevice, NamesAndUuidsAreDistinctAndMemoryIsTheConfiguredSize) {
  CUuuid uuids[3];
  for (int d = 0; d < 3; ++d) {
    ASSERT_CU(cuDeviceGetUuid(&uuids[d], d));
    char name[64];
    ASSERT_CU(cuDeviceGetName(name, sizeof(name), d));
    EXPECT_EQ(std::string(name), "uvmpool simulated device " + std::to_string(d));
    std::size_t bytes = 0;
    ASSERT_CU(cuDeviceTotalMem(&bytes, d));
    EXPECT_EQ(bytes, 128 * kMiB);
  }
  EXPECT_NE(std::memcmp(&uuids[0], &uuids[1], sizeof(CUuuid)), 0);
  EXPECT_NE(std::memcmp(&uuids[1], &uuids[2], sizeof(CUuuid)), 0);
  EXPECT_NE(std::memcmp(&uuids[0], &uuids[2], sizeof(CUuuid)), 0);
}

TEST_F(MultiDevice, EachDeviceHasItsOwnPrimaryContextAndCapacity) {
  CUcontext c0 = nullptr, c1 = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&c0, 0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&c1, 1));
  EXPECT_NE(c0, c1);
  ASSERT_CU(cuCtxSetCurrent(c0));
  const std::size_t free0 = free_bytes();
  ASSERT_CU(cuCtxSetCurrent(c1));
  CUdevice dev = -1;
  ASSERT_CU(cuCtxGetDevice(&dev));
  EXPECT_EQ(dev, 1);
  const std::size_t free1 = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 16 * kMiB));
  int ordinal = -1;
  ASSERT_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(free_bytes(), free1 - 16 * kMiB);
  ASSERT_CU(cuCtxSetCurrent(c0));
  EXPECT_EQ(free_bytes(), free0);
}

TEST_F(MultiDevice, VmmHandlesAreChargedToTheirDevice) {
  CUcontext c2 = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&c2, 2));
  ASSERT_CU(cuCtxSetCurrent(c2));
  const std::size_t before = free_bytes();
  const CUmemAllocationProp on2 = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 2);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, 8 * kMiB, &on2, 0));
  EXPECT_EQ(free_bytes(), before - 8 * kMiB);
  CUmemGenericAllocationHandle too_big = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&too_big, 128 * kMiB, &on2, 0));
  const CUmemAllocationProp on3 = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 3);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuMemCreate(&too_big, 8 * kMiB, &on3, 0));
  ASSERT_CU(cuMemRelease(h));
  EXPECT_EQ(free_bytes(), before);
}

}  // namespace
}  // namespace simtest
