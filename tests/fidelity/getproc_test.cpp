// cuGetProcAddress_v2: what it finds, for which version and stream flavour, and how it says no.
#include "fidelity.h"

namespace fidelity {
namespace {

namespace sig = uvmpool::driver::sig;

class GetProcAddress : public DriverTest {
 protected:
  CUresult proc(const char* name, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* found) {
    return CU(cuGetProcAddress_v2, name, pfn, version, flags, found);
  }
  // The entry for `name`, or nullptr (and a test failure) when it is not found.
  void* lookup(const char* name, int version, cuuint64_t flags) {
    void* pfn = nullptr;
    auto found = static_cast<CUdriverProcAddressQueryResult>(-1);
    EXPECT_CU(proc(name, &pfn, version, flags, &found)) << " for " << name;
    EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    EXPECT_NE(pfn, nullptr) << name;
    return pfn;
  }
};

TEST_F(GetProcAddress, DriverReportsCuda13OrLater) {
  int version = 0;
  ASSERT_CU(CU(cuDriverGetVersion, &version));
  EXPECT_GE(version, 13000);
}

TEST_F(GetProcAddress, CuMemAllocAt13000IsFoundAndAllocates) {
  auto alloc = reinterpret_cast<sig::cuMemAlloc_v2>(lookup("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT));
  ASSERT_NE(alloc, nullptr);
  CUdeviceptr p = 0;
  ASSERT_CU(alloc(&p, kMiB));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_CU(CU(cuMemGetAddressRange_v2, &base, &size, p));
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, kMiB);
  EXPECT_CU(mem_free(p));
}

TEST_F(GetProcAddress, PointersEqualTheExportedVersionedSymbols) {
  // Measured equal (H200, driver 580.159.04): the driver hands out the very functions it exports.
  // Only this test depends on the equality (a driver could hand out internal entry points).
  EXPECT_EQ(lookup("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            reinterpret_cast<void*>(d.cuMemAlloc_v2));
  EXPECT_EQ(lookup("cuMemFree", 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            reinterpret_cast<void*>(d.cuMemFree_v2));
  EXPECT_EQ(lookup("cuMemCreate", 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            reinterpret_cast<void*>(d.cuMemCreate));
  EXPECT_EQ(lookup("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
            reinterpret_cast<void*>(d.cuMemAllocAsync));
  EXPECT_EQ(lookup("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void*>(d.cuMemAllocAsync_ptsz));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void*>(d.cuMemcpyHtoD_v2_ptds));
}

// Measured (H200, driver 580.159.04, a cuGetProcAddress_v2 probe of each name at 10.0 to 13.0): cuda.h
// makes cuGraphInstantiate a macro for cuGraphInstantiateWithFlags from CUDA 12.0 on, but the name
// "cuGraphInstantiate" is answered with CUDA 11's five-parameter cuGraphInstantiate_v2 at every version
// from 11.0, 13.0 included (uvmpool answered it with WithFlags until 2026-12-04, and a program calling
// what it was given with five arguments would have passed its error-node pointer as the flags). The
// node calls of two versions change at 12.0 (kernel nodes) and 12.3 (cuGraphAddNode, new in 12.2).
TEST_F(GetProcAddress, GraphCallsOfSeveralVersionsAreTheDriversVersionedSymbols) {
  constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
  for (const int version : {11000, 12000, 12080, 13000})
    EXPECT_EQ(lookup("cuGraphInstantiate", version, kDefault), reinterpret_cast<void*>(d.cuGraphInstantiate_v2))
        << version;
  EXPECT_EQ(lookup("cuGraphAddKernelNode", 11040, kDefault), reinterpret_cast<void*>(d.cuGraphAddKernelNode));
  EXPECT_EQ(lookup("cuGraphAddKernelNode", 12000, kDefault), reinterpret_cast<void*>(d.cuGraphAddKernelNode_v2));
  EXPECT_EQ(lookup("cuGraphExecKernelNodeSetParams", 11000, kDefault),
            reinterpret_cast<void*>(d.cuGraphExecKernelNodeSetParams));
  EXPECT_EQ(lookup("cuGraphAddNode", 12020, kDefault), reinterpret_cast<void*>(d.cuGraphAddNode));
  EXPECT_EQ(lookup("cuGraphAddNode", 13000, kDefault), reinterpret_cast<void*>(d.cuGraphAddNode_v2));
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found{};
  EXPECT_CU(proc("cuGraphAddNode", &pfn, 12000, kDefault, &found));
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(pfn, nullptr);
}

TEST_F(GetProcAddress, PerThreadAndLegacyCuMemAllocAsyncAreDifferentEntries) {
  void* legacy = lookup("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  void* per_thread = lookup("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  EXPECT_NE(legacy, per_thread);
  // Functions without stream semantics have one entry whatever the flags.
  EXPECT_EQ(lookup("cuMemCreate", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
            lookup("cuMemCreate", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
}

TEST_F(GetProcAddress, PerThreadCuMemAllocAsyncAllocatesOnThePerThreadStream) {
  const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  auto alloc = reinterpret_cast<sig::cuMemAllocAsync_ptsz>(lookup("cuMemAllocAsync", 13000, ptds));
  auto release = reinterpret_cast<sig::cuMemFreeAsync_ptsz>(lookup("cuMemFreeAsync", 13000, ptds));
  auto sync = reinterpret_cast<sig::cuStreamSynchronize_ptsz>(lookup("cuStreamSynchronize", 13000, ptds));
  auto memset = reinterpret_cast<sig::cuMemsetD32Async_ptsz>(lookup("cuMemsetD32Async", 13000, ptds));
  ASSERT_TRUE(alloc && release && sync && memset);
  CUdeviceptr p = 0;
  ASSERT_CU(alloc(&p, kMiB, CUstream{}));  // the per-thread default stream
  EXPECT_NE(p, 0u);
  EXPECT_CU(memset(p, 3u, kMiB / 4, CUstream{}));
  EXPECT_CU(sync(CUstream{}));
  EXPECT_EQ(read_words(p + kMiB - 16, 4), std::vector<std::uint32_t>(4, 3u));
  EXPECT_CU(release(p, CUstream{}));
  EXPECT_CU(sync(CUstream{}));
}

TEST_F(GetProcAddress, UnknownNameIsSuccessWithNullAndSymbolNotFound) {
  // As cuda.h says, and measured (H200, driver 580.159.04): CUDA_SUCCESS, not CUDA_ERROR_NOT_FOUND.
  void* pfn = reinterpret_cast<void*>(0x1);
  auto found = static_cast<CUdriverProcAddressQueryResult>(-1);
  EXPECT_CU(proc("cuNoSuchFunctionAnywhere", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
}

TEST_F(GetProcAddress, V1FormSaysNotFoundAndLeavesThePointerAlone) {
  // The CUDA 11.3 form has no symbolStatus: it says CUDA_ERROR_NOT_FOUND, and leaves *pfn as it was
  // (measured, H200, driver 580.159.04: a 0x1 sentinel survived).
  void* pfn = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(CU(cuGetProcAddress, "cuNoSuchFunctionAnywhere", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(pfn, reinterpret_cast<void*>(0x1));
}

TEST_F(GetProcAddress, NameAskedBeforeItsVersionIsSuccessWithNullAndVersionNotSufficient) {
  // cuMemAddressReserve appeared in CUDA 10.2 (10020). Measured (H200, driver 580.159.04).
  void* pfn = reinterpret_cast<void*>(0x1);
  auto found = static_cast<CUdriverProcAddressQueryResult>(-1);
  EXPECT_CU(proc("cuMemAddressReserve", &pfn, 10000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_NE(lookup("cuMemAddressReserve", 10020, CU_GET_PROC_ADDRESS_DEFAULT), nullptr);
}

TEST_F(GetProcAddress, VersionAboveTheDriversIsInvalidValue) {
  // cuda.h: "If the specified CUDA version is greater than the driver version, the API will return
  // CUDA_ERROR_INVALID_VALUE". Measured (H200, driver 580.159.04), with pfn and status untouched.
  int driver = 0;
  ASSERT_CU(CU(cuDriverGetVersion, &driver));
  void* pfn = reinterpret_cast<void*>(0x1);
  auto found = static_cast<CUdriverProcAddressQueryResult>(77);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               proc("cuMemAlloc", &pfn, driver + 1000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
}

TEST_F(GetProcAddress, SymbolStatusIsOptional) {
  void* pfn = nullptr;
  EXPECT_CU(proc("cuMemGetInfo", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  ASSERT_NE(pfn, nullptr);
  std::size_t free = 0, tot = 0;
  EXPECT_CU(reinterpret_cast<sig::cuMemGetInfo_v2>(pfn)(&free, &tot));
  EXPECT_EQ(tot, total);
}

}  // namespace
}  // namespace fidelity
