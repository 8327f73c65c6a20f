// The main suite's settings are pinned here, before the first driver call (the simulated driver
// reads UVMPOOL_SIM_* on its first call), so the suite behaves the same under CTest and by hand.
#include <cstdlib>

#include "sim_test.h"

namespace simtest {

void SimTest::SetUp() {
  ASSERT_CU(cuInit(0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  ASSERT_CU(cuCtxSetCurrent(ctx));
}

void SimTest::TearDown() {
  uvmpool_sim_clear_failures();
  cuCtxSetCurrent(nullptr);
  cuDevicePrimaryCtxRelease(0);
}

void KernelTest::SetUp() {
  SimTest::SetUp();
  ASSERT_CU(cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE));
}

CUfunction KernelTest::kernel(const char* name) {
  CUfunction f = nullptr;
  EXPECT_CU(cuModuleGetFunction(&f, module, name));
  return f;
}

}  // namespace simtest

int main(int argc, char** argv) {
  setenv("UVMPOOL_SIM_DEVICES", "1", 1);
  setenv("UVMPOOL_SIM_DEVICE_MEMORY", "256M", 1);
  setenv("UVMPOOL_SIM_HOST_MEMORY", "64M", 1);
  setenv("UVMPOOL_SIM_GRANULARITY", "2M", 1);
  unsetenv("UVMPOOL_SIM_FAIL");
  // Round cost constants, so that tests of the clock can state exact times (sim_test.h names them).
  setenv("UVMPOOL_SIM_HBM_READ_GBPS", "1000", 1);
  setenv("UVMPOOL_SIM_HBM_WRITE_GBPS", "500", 1);
  setenv("UVMPOOL_SIM_HOST_READ_GBPS", "50", 1);
  setenv("UVMPOOL_SIM_HOST_WRITE_GBPS", "25", 1);
  setenv("UVMPOOL_SIM_COPY_GBPS", "40", 1);
  setenv("UVMPOOL_SIM_PAGEABLE_GBPS", "10", 1);
  setenv("UVMPOOL_SIM_LAUNCH_NS", "2000", 1);
  setenv("UVMPOOL_SIM_KERNEL_NS", "3000", 1);
  setenv("UVMPOOL_SIM_COPY_NS", "1000", 1);
  setenv("UVMPOOL_SIM_CALL_NS", "100", 1);
  setenv("UVMPOOL_SIM_QUERY_NS", "100", 1);
  setenv("UVMPOOL_SIM_HOST_FUNC_NS", "5000", 1);
  setenv("UVMPOOL_SIM_WAIT_VALUE_NS", "700", 1);
  setenv("UVMPOOL_SIM_HANG_TIMEOUT_MS", "2000", 1);
  setenv("UVMPOOL_SIM_SET_ACCESS_DEVICE_NS", std::to_string(simtest::kSetAccessDeviceNs).c_str(), 1);
  setenv("UVMPOOL_SIM_SET_ACCESS_HOST_NS", std::to_string(simtest::kSetAccessHostNs).c_str(), 1);
  setenv("UVMPOOL_SIM_SET_ACCESS_HOST_NS_PER_GIB", std::to_string(simtest::kSetAccessHostNsPerGib).c_str(), 1);
  setenv("UVMPOOL_SIM_SET_ACCESS_NS_PER_GIB", "0", 1);
  setenv("UVMPOOL_SIM_SET_ACCESS_BESIDE_COPY_NS", std::to_string(simtest::kSetAccessBesideCopyNs).c_str(), 1);
  setenv("UVMPOOL_SIM_UNMAP_DEVICE_NS", std::to_string(simtest::kUnmapDeviceNs).c_str(), 1);
  setenv("UVMPOOL_SIM_UNMAP_HOST_NS", std::to_string(simtest::kUnmapHostNs).c_str(), 1);
  setenv("UVMPOOL_SIM_UNMAP_HOST_NS_PER_GIB", std::to_string(simtest::kUnmapHostNsPerGib).c_str(), 1);
  setenv("UVMPOOL_SIM_RELEASE_DEVICE_NS", std::to_string(simtest::kReleaseDeviceNs).c_str(), 1);
  setenv("UVMPOOL_SIM_RELEASE_HOST_NS", std::to_string(simtest::kReleaseHostNs).c_str(), 1);
  setenv("UVMPOOL_SIM_RELEASE_HOST_NS_PER_GIB", std::to_string(simtest::kReleaseHostNsPerGib).c_str(), 1);
  setenv("UVMPOOL_SIM_RELEASE_NS_PER_GIB", "0", 1);
  ::testing::InitGoogleTest(&argc, argv);
  // Death tests re-run their test in a fresh process, which also gives them a fresh driver.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
