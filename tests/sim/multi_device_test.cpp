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

// Peer access reaches the peer's cuMemAlloc memory from the enabling context's kernels, and nothing
// else: a VMM mapping stays reachable only from the devices cuMemSetAccess named (as on a GPU; pool
// memory therefore needs uvmpool's own peer handling, src/pool/peer_access.h).
TEST_F(MultiDevice, PeerAccessReachesThePeersAllocationsButNotItsVmmMappings) {
  CUcontext c0 = nullptr, c1 = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&c0, 0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&c1, 1));
  int can = -1;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 0));
  EXPECT_EQ(can, 1);
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 1));
  EXPECT_EQ(can, 0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceCanAccessPeer(&can, 1, 3));

  ASSERT_CU(cuCtxSetCurrent(c0));
  CUdeviceptr on0 = 0, mapped0 = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemAlloc(&on0, 4096));
  ASSERT_CU(cuMemsetD32(on0, 3, 1024));
  ASSERT_CU(make_vmm(2 * kMiB, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0), &mapped0, &h));  // access: device 0
  ASSERT_CU(cuMemsetD32(mapped0, 3, 1024));

  ASSERT_CU(cuCtxSetCurrent(c1));
  CUmodule module = nullptr;
  CUfunction sum = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE));
  ASSERT_CU(cuModuleGetFunction(&sum, module, "uvmpool_sum_u32"));
  CUdeviceptr out = 0;
  ASSERT_CU(cuMemAlloc(&out, 8));
  EXPECT_CU_EQ(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(c0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_DEVICE, cuCtxEnablePeerAccess(c1, 0));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuCtxEnablePeerAccess(c0, 1));
  ASSERT_CU(cuCtxEnablePeerAccess(c0, 0));
  EXPECT_CU_EQ(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cuCtxEnablePeerAccess(c0, 0));
  ASSERT_CU(launch(sum, nullptr, on0, std::uint64_t{1024}, out));
  std::uint64_t total = 0;
  ASSERT_CU(cuMemcpyDtoH(&total, out, sizeof total));
  EXPECT_EQ(total, 3u * 1024);
  ASSERT_CU(cuCtxDisablePeerAccess(c0));
  ASSERT_CU(cuCtxEnablePeerAccess(c0, 0));
  // The VMM mapping: peer access does not reach it; the kernel faults (sticky in context 1).
  const CUresult launched = launch(sum, nullptr, mapped0, std::uint64_t{1024}, out);
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, launched == CUDA_SUCCESS ? cuCtxSynchronize() : launched);
  ASSERT_CU(cuDevicePrimaryCtxReset(1));  // clears the fault, the module and the peer link
  ASSERT_CU(cuCtxSetCurrent(c0));
  ASSERT_CU(cuMemUnmap(mapped0, 2 * kMiB));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(mapped0, 2 * kMiB));
  ASSERT_CU(cuMemFree(on0));
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));  // context 1 was reset: nothing to release
}

}  // namespace
}  // namespace simtest
