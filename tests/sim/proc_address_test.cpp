// cuGetProcAddress (CUDA 11.3 form) and cuGetProcAddress_v2: version and stream-flavour resolution.
#include <dlfcn.h>
#include <unistd.h>

#include "sim_test.h"

// cuda.h maps cuGetProcAddress to the _v2; the CUDA 11.3 form is exported under its own name.
#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);

namespace simtest {
namespace {

using ProcAddress = SimTest;

void* exported(const char* symbol) { return dlsym(RTLD_DEFAULT, symbol); }

void* resolve(const char* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* found = nullptr) {
  void* pfn = reinterpret_cast<void*>(0x1);
  EXPECT_CU(cuGetProcAddress_v2(name, &pfn, version, flags, found)) << " for " << name;
  return pfn;
}

TEST_F(ProcAddress, CuMemAllocAt3020IsTheV2Export) {
  ASSERT_NE(exported("cuMemAlloc_v2"), nullptr);
  EXPECT_EQ(resolve("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_DEFAULT), exported("cuMemAlloc_v2"));
  EXPECT_EQ(resolve("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), exported("cuMemAlloc_v2"));
}

TEST_F(ProcAddress, PerThreadFlagGivesThePtszExport) {
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(resolve("cuMemAllocAsync", 12000, per_thread), exported("cuMemAllocAsync_ptsz"));
  EXPECT_EQ(resolve("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), exported("cuMemAllocAsync"));
  EXPECT_EQ(resolve("cuMemcpyHtoD", 12000, per_thread), exported("cuMemcpyHtoD_v2_ptds"));
  // Without a per-thread variant, the one entry is the answer.
  EXPECT_EQ(resolve("cuMemCreate", 12000, per_thread), exported("cuMemCreate"));
}

TEST_F(ProcAddress, ResolvedFunctionsWork) {
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(
      resolve("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  ASSERT_NE(alloc, nullptr);
  CUdeviceptr p = 0;
  ASSERT_CU(alloc(&p, kMiB, nullptr));  // the per-thread default stream
  EXPECT_CU(cuMemFree(p));
}

TEST_F(ProcAddress, V2ReportsWhySomethingIsNotFoundAndStillSucceeds) {
  CUdriverProcAddressQueryResult found = static_cast<CUdriverProcAddressQueryResult>(-1);
  EXPECT_NE(resolve("cuMemAlloc", 13000, 0, &found), nullptr);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(resolve("cuNoSuchFunction", 13000, 0, &found), nullptr);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(resolve("cuMemAddressReserve", 10000, 0, &found), nullptr);  // appeared in 10.2
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(resolve("cuMemAlloc", 2000, 0, &found), nullptr);  // the v1 is not simulated
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

TEST_F(ProcAddress, CudaElevenThreeFormSaysNotFound) {
  void* pfn = reinterpret_cast<void*>(0x1);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuGetProcAddress("cuNoSuchFunction", &pfn, 11030, 0));
  EXPECT_EQ(pfn, reinterpret_cast<void*>(0x1)) << "the real driver leaves *pfn alone here (H200, 580)";
  ASSERT_CU(cuGetProcAddress("cuMemFree", &pfn, 11030, 0));
  EXPECT_EQ(pfn, exported("cuMemFree_v2"));
}

TEST_F(ProcAddress, CuGetProcAddressFindsItself) {
  EXPECT_EQ(resolve("cuGetProcAddress", 11030, 0), exported("cuGetProcAddress"));
  EXPECT_EQ(resolve("cuGetProcAddress", 12000, 0), exported("cuGetProcAddress_v2"));
  EXPECT_EQ(resolve("cuGetProcAddress", 13000, 0), exported("cuGetProcAddress_v2"));
}

TEST_F(ProcAddress, BadArgumentsAreInvalidValue) {
  void* pfn = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress_v2("cuMemAlloc", &pfn, 14000, 0, nullptr));  // > driver
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress_v2("cuMemAlloc", &pfn, 13000, 4, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress_v2(nullptr, &pfn, 13000, 0, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress_v2("cuMemAlloc", nullptr, 13000, 0, nullptr));
}

TEST(ProcAddressBeforeInit, ResolvesBeforeCuInit) {
  // In a fresh process, as the CUDA runtime does it: cuGetProcAddress first, then cuInit through it.
  EXPECT_EXIT(
      {
        void* pfn = nullptr;
        const bool found = cuGetProcAddress_v2("cuInit", &pfn, 13000, 0, nullptr) == CUDA_SUCCESS && pfn;
        const bool init = found && reinterpret_cast<CUresult (*)(unsigned)>(pfn)(0) == CUDA_SUCCESS;
        _exit(init ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace simtest
