// Failures armed from UVMPOOL_SIM_FAIL at load, as CTest sets it for this executable:
//   cuMemAlloc:2,cuMemCreate:1:CUDA_ERROR_INVALID_VALUE,cuMemGetInfo_v2:1:201,noSuchFunction:1,cuMemFree:zero
// (the last two are malformed: reported and ignored). Calls count from load, so each test makes the
// calls it checks first, whatever ran before it in this process.
#include "ctest_registration.h"
#include "sim_test.h"

namespace simtest {
namespace {

class EnvFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
    ASSERT_CU(cuCtxSetCurrent(ctx));
  }
  CUcontext ctx = nullptr;
};

TEST_F(EnvFailures, SecondCuMemAllocFailsWithTheDefaultOutOfMemory) {
  ASSERT_EQ(uvmpool_sim_call_count("cuMemAlloc"), 0u) << "run in its own process, as CTest does";
  CUdeviceptr a = 0, b = 0, c = 0;
  EXPECT_CU(cuMemAlloc(&a, 4096));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&b, 4096));
  EXPECT_CU(cuMemAlloc(&c, 4096));
  EXPECT_CU(cuMemFree(a));  // the malformed cuMemFree item armed nothing
}

TEST_F(EnvFailures, CodeMayBeACUresultName) {
  ASSERT_EQ(uvmpool_sim_call_count("cuMemCreate"), 0u) << "run in its own process, as CTest does";
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, 2 * kMiB, &prop, 0));
  EXPECT_CU(cuMemCreate(&h, 2 * kMiB, &prop, 0));
}

TEST_F(EnvFailures, CodeMayBeANumberAndTheSymbolNameWorks) {
  ASSERT_EQ(uvmpool_sim_call_count("cuMemGetInfo"), 0u) << "run in its own process, as CTest does";
  std::size_t free = 0, total = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemGetInfo(&free, &total));
  EXPECT_CU(cuMemGetInfo(&free, &total));
}

TEST_F(EnvFailures, ClearFailuresDisarmsThoseFromTheEnvironment) {
  ASSERT_EQ(uvmpool_sim_call_count("cuMemCreate"), 0u) << "run in its own process, as CTest does";
  uvmpool_sim_clear_failures();
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(cuMemCreate(&h, 2 * kMiB, &prop, 0));
}

}  // namespace
}  // namespace simtest
