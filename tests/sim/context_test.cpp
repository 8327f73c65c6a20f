// Primary and created contexts, the per-thread current-context stack, and which calls need one.
#include <thread>

#include "sim_test.h"

// cuda.h maps cuCtxCreate to cuCtxCreate_v4; the CUDA 3.2 form is exported too.
extern "C" CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);

namespace simtest {
namespace {

using Contexts = SimTest;

template <typename Body>
void on_a_new_thread(Body&& body) {
  std::thread thread(std::forward<Body>(body));
  thread.join();
}

TEST_F(Contexts, ANewThreadHasNoCurrentContext) {
  on_a_new_thread([] {
    CUcontext current = reinterpret_cast<CUcontext>(0x1);
    EXPECT_CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(current, nullptr);
  });
}

TEST_F(Contexts, CallsThatNeedAContextAreInvalidContextWithoutOne) {
  on_a_new_thread([] {
    CUdeviceptr p = 0;
    std::size_t free = 0, total = 0;
    void* host = nullptr;
    CUstream stream = nullptr;
    CUevent event = nullptr;
    CUdevice dev = -1;
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&p, 4096));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemGetInfo(&free, &total));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemHostAlloc(&host, 4096, 0));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuStreamCreate(&stream, 0));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuEventCreate(&event, 0));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetDevice(&dev));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize());
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemAllocAsync(&p, 4096, nullptr));
  });
}

TEST_F(Contexts, VirtualMemoryCallsWorkWithoutAContext) {
  on_a_new_thread([] {
    const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    std::size_t granularity = 0;
    EXPECT_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    ASSERT_CU(make_vmm(kGranularity, prop, &va, &h));  // reserve, create, map, set access
    EXPECT_CU(cuMemUnmap(va, kGranularity));
    EXPECT_CU(cuMemRelease(h));
    EXPECT_CU(cuMemAddressFree(va, kGranularity));
  });
}

TEST_F(Contexts, PrimaryContextIsCountedAndInactiveAfterTheLastRelease) {
  CUcontext again = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, 0));  // the fixture holds one reference
  EXPECT_EQ(again, ctx);
  unsigned flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 1);
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(0));  // nothing left to release
  // Still current here, but destroyed: calls that need it say so.
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuMemAlloc(&p, 4096));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));  // for TearDown
}

TEST_F(Contexts, TheLastPrimaryReleaseFreesTheContextsMemory) {
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 8 * kMiB));
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  EXPECT_EQ(free_bytes(), before);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, p));
}

TEST_F(Contexts, ResetFreesTheContextsMemoryAndDeactivatesIt) {
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 8 * kMiB));
  ASSERT_CU(cuDevicePrimaryCtxReset(0));
  unsigned flags = 0;
  int active = 1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 0);
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(Contexts, SetFlagsIsReportedByGetStateAndBadFlagsAreRefused) {
  ASSERT_CU(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
  unsigned flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_CTX_SCHED_BLOCKING_SYNC));
  EXPECT_EQ(active, 1);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags(0, 0x100));
}

TEST_F(Contexts, CreatePushesTheNewContextAndDestroyPopsIt) {
  CUcontext created = nullptr, current = nullptr;
  ASSERT_CU(cuCtxCreate_v2(&created, 0, 0));
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, created);
  EXPECT_NE(created, ctx);
  ASSERT_CU(cuCtxDestroy(created));
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, ctx);
  EXPECT_CU_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxDestroy(created));
}

TEST_F(Contexts, CreateV4WithoutParamsIsCreateV2) {
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  CUdevice dev = -1;
  ASSERT_CU(cuCtxGetDevice(&dev));
  EXPECT_EQ(dev, 0);
  EXPECT_CU(cuCtxDestroy(created));
}

TEST_F(Contexts, DestroyingAContextFreesItsMemory) {
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate_v2(&created, 0, 0));
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 16 * kMiB));
  ASSERT_CU(cuCtxDestroy(created));
  EXPECT_GT(free_bytes(), before);  // before also counted the context's own share
  CUdeviceptr base = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, nullptr, p));
}

TEST_F(Contexts, PushAndPopFollowStackOrder) {
  CUcontext a = nullptr, popped = nullptr, current = nullptr;
  ASSERT_CU(cuCtxCreate_v2(&a, 0, 0));  // stack: ctx, a
  ASSERT_CU(cuCtxPushCurrent(ctx));       // stack: ctx, a, ctx
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, ctx);
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, a);
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, a);
  ASSERT_CU(cuCtxPopCurrent(nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&popped));  // empty
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuCtxPushCurrent(nullptr));
  EXPECT_CU(cuCtxDestroy(a));
}

TEST_F(Contexts, SetCurrentReplacesTheTopAndNullPopsIt) {
  CUcontext a = nullptr, current = nullptr;
  ASSERT_CU(cuCtxCreate_v2(&a, 0, 0));  // stack: ctx, a
  ASSERT_CU(cuCtxSetCurrent(ctx));        // stack: ctx, ctx
  ASSERT_CU(cuCtxSetCurrent(nullptr));    // stack: ctx
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, ctx);
  ASSERT_CU(cuCtxSetCurrent(nullptr));  // empty
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, nullptr);
  ASSERT_CU(cuCtxSetCurrent(nullptr));  // no-op on an empty stack
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(reinterpret_cast<CUcontext>(&current)));
  EXPECT_CU(cuCtxDestroy(a));
}

TEST_F(Contexts, ContextDestroyedByAnotherThreadIsDestroyedHere) {
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate_v2(&created, 0, 0));
  on_a_new_thread([&] { EXPECT_CU(cuCtxDestroy(created)); });
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, created);  // still on this thread's stack
  EXPECT_CU_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxSynchronize());
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(Contexts, PrimaryOrUnknownContextsCannotBeDestroyed) {
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(ctx));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(nullptr));
}

}  // namespace
}  // namespace simtest
