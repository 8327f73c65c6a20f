// The control API: failures injected into the Nth call, call counts, and UVMPOOL_SIM_FAIL read at the
// first driver call.
#include <unistd.h>

#include <cstdlib>

#include "sim_test.h"

namespace simtest {
namespace {

using FaultInjection = SimTest;
using CallCounts = SimTest;

TEST_F(FaultInjection, TheNthCallFromNowFailsWithTheGivenCodeAndOnlyIt) {
  ASSERT_EQ(uvmpool_sim_fail("cuMemAlloc", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  CUdeviceptr a = 0, b = 0, c = 0;
  EXPECT_CU(cuMemAlloc(&a, 4096));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&b, 4096));
  EXPECT_CU(cuMemAlloc(&c, 4096));
}

TEST_F(FaultInjection, AnInjectedFailureDoesNothing) {
  const std::size_t before = free_bytes();
  ASSERT_EQ(uvmpool_sim_fail("cuMemAlloc_v2", 1, CUDA_ERROR_ILLEGAL_ADDRESS), 0);
  CUdeviceptr p = 12345;
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuMemAlloc(&p, 8 * kMiB));
  EXPECT_EQ(p, 12345u);
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(FaultInjection, ABaseNameCountsAllVariantsAndASymbolOnlyItself) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  char byte = 0;
  void* pfn = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemcpyHtoD", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto htod_ptds = reinterpret_cast<CUresult (*)(CUdeviceptr, const void*, std::size_t)>(pfn);
  // Base name: the legacy call and then the per-thread call count down together.
  ASSERT_EQ(uvmpool_sim_fail("cuMemcpyHtoD", 2, CUDA_ERROR_INVALID_VALUE), 0);
  EXPECT_CU(cuMemcpyHtoD(p, &byte, 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, htod_ptds(p, &byte, 1));
  // Symbol: only the per-thread variant counts.
  ASSERT_EQ(uvmpool_sim_fail("cuMemcpyHtoD_v2_ptds", 1, CUDA_ERROR_UNKNOWN), 0);
  EXPECT_CU(cuMemcpyHtoD(p, &byte, 1));
  EXPECT_CU_EQ(CUDA_ERROR_UNKNOWN, htod_ptds(p, &byte, 1));
}

TEST_F(FaultInjection, UnknownFunctionsAndZeroCallsAreRefused) {
  EXPECT_EQ(uvmpool_sim_fail("cuNoSuchFunction", 1, CUDA_ERROR_UNKNOWN), -1);
  EXPECT_EQ(uvmpool_sim_fail(nullptr, 1, CUDA_ERROR_UNKNOWN), -1);
  EXPECT_EQ(uvmpool_sim_fail("cuMemAlloc", 0, CUDA_ERROR_UNKNOWN), -1);
}

TEST_F(FaultInjection, ClearFailuresDisarmsThem) {
  ASSERT_EQ(uvmpool_sim_fail("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY), 0);
  uvmpool_sim_clear_failures();
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemCreate(&h, kGranularity, &prop, 0));
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(FaultInjection, CallsThroughGetProcAddressAreInjectedToo) {
  void* pfn = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemGetInfo", &pfn, 13000, 0, nullptr));
  ASSERT_EQ(uvmpool_sim_fail("cuMemGetInfo", 1, CUDA_ERROR_INVALID_CONTEXT), 0);
  std::size_t free = 0, total = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, reinterpret_cast<CUresult (*)(std::size_t*, std::size_t*)>(pfn)(&free, &total));
}

TEST(FaultInjectionSettings, UvmpoolSimFailSetBeforeTheFirstDriverCallIsArmed) {
  // A fresh process whose settings are read at its first driver call, after this setenv.
  EXPECT_EXIT(
      {
        setenv("UVMPOOL_SIM_FAIL", "cuInit:1:CUDA_ERROR_NO_DEVICE,cuDeviceGetCount:2:3", 1);
        int count = 0;
        bool ok = cuInit(0) == CUDA_ERROR_NO_DEVICE && cuInit(0) == CUDA_SUCCESS;
        ok = ok && cuDeviceGetCount(&count) == CUDA_SUCCESS;
        ok = ok && cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED;  // code given as a number
        ok = ok && uvmpool_sim_call_count("cuInit") == 2;
        _exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CallCounts, EveryCallIsCountedFailedOnesIncluded) {
  uvmpool_sim_reset_counts();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
  ASSERT_EQ(uvmpool_sim_fail("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY), 0);
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, 64));
  EXPECT_EQ(uvmpool_sim_call_count("cuMemAlloc"), 3u);
  EXPECT_EQ(uvmpool_sim_call_count("cuMemAlloc_v2"), 3u);
  EXPECT_EQ(uvmpool_sim_call_count("cuMemFree"), 0u);
  EXPECT_EQ(uvmpool_sim_call_count("cuNoSuchFunction"), 0u);
}

TEST_F(CallCounts, BaseNameSumsVariantsAndResetZeroes) {
  uvmpool_sim_reset_counts();
  void* pfn = nullptr;
  ASSERT_CU(cuGetProcAddress("cuStreamQuery", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  ASSERT_CU(cuStreamQuery(nullptr));
  ASSERT_CU(reinterpret_cast<CUresult (*)(CUstream)>(pfn)(nullptr));
  ASSERT_CU(reinterpret_cast<CUresult (*)(CUstream)>(pfn)(nullptr));
  EXPECT_EQ(uvmpool_sim_call_count("cuStreamQuery"), 3u);
  EXPECT_EQ(uvmpool_sim_call_count("cuStreamQuery_ptsz"), 2u);
  EXPECT_EQ(uvmpool_sim_call_count("cuGetProcAddress"), 1u);  // the _v2, counted under its base
  uvmpool_sim_reset_counts();
  EXPECT_EQ(uvmpool_sim_call_count("cuStreamQuery"), 0u);
}

}  // namespace
}  // namespace simtest
