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

}  // namespace simtest

int main(int argc, char** argv) {
  setenv("UVMPOOL_SIM_DEVICES", "1", 1);
  setenv("UVMPOOL_SIM_DEVICE_MEMORY", "256M", 1);
  setenv("UVMPOOL_SIM_HOST_MEMORY", "64M", 1);
  setenv("UVMPOOL_SIM_GRANULARITY", "2M", 1);
  unsetenv("UVMPOOL_SIM_FAIL");
  ::testing::InitGoogleTest(&argc, argv);
  // Death tests re-run their test in a fresh process, which also gives them a fresh driver.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
