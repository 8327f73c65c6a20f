// What the driver answers to misuse: bad frees, unknown handles and ranges, misaligned or empty
// requests, and calls made with no current context. Built last in the suite: should a real driver
// answer one of these with a sticky fault, only the tests after it suffer (SetUp reports it).
#include "fidelity.h"

namespace fidelity {
namespace {

using Misuse = DriverTest;
using NoContext = DriverTest;

TEST_F(Misuse, FreeOfAnInteriorPointerIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_free(p + 256));
  // The allocation is untouched.
  ASSERT_CU(CU(cuMemsetD32_v2, p, 4u, kMiB / 4));
  EXPECT_EQ(read_words(p, 2), std::vector<std::uint32_t>(2, 4u));
}

TEST_F(Misuse, DoubleFreeIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  ASSERT_CU(mem_free(p));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemFree_v2, p));
}

TEST_F(Misuse, FreeOfAHostPointerIsInvalidValue) {
  std::vector<char> plain(4096);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemFree_v2, reinterpret_cast<CUdeviceptr>(plain.data())));
}

TEST_F(Misuse, FreeOfNullSucceeds) {
  // Measured (H200, driver 580.159.04).
  EXPECT_CU(CU(cuMemFree_v2, CUdeviceptr{0}));
}

TEST_F(Misuse, ZeroLengthMemsetAndCopySucceed) {
  // Measured (H200, driver 580.159.04).
  CUdeviceptr p = 0;
  std::uint32_t word = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  EXPECT_CU(CU(cuMemsetD32_v2, p, 0u, std::size_t{0}));
  EXPECT_CU(CU(cuMemcpyHtoD_v2, p, &word, std::size_t{0}));
}

TEST_F(Misuse, AllocOfZeroBytesIsInvalidValue) {
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, mem_alloc(&p, 0));
}

TEST_F(Misuse, ReleaseOfAnInvalidHandleIsInvalidValue) {
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemRelease, CUmemGenericAllocationHandle{0}));
}

// cuMemAlloc memory lies in no range the program reserved: the driver refuses to unmap it or map over
// it, and the memory stays as it was (measured: H200, driver 580.159.04). uvmpool answers the same for pool memory, which is mapped
// with the VMM calls (src/hooks/pool_backend.cpp), rather than let the program unmap the pool's pieces.
TEST_F(Misuse, UnmapOrMapOverCuMemAllocMemoryIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 2 * gran));
  ASSERT_CU(CU(cuMemsetD32_v2, p, 9u, 2 * gran / 4));
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemUnmap, p, 2 * gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap, p, gran, std::size_t{0}, h, 0ULL));
  EXPECT_EQ(read_words(p + 2 * gran - 8, 2), std::vector<std::uint32_t>(2, 9u));
  ASSERT_CU(mem_free(p));
}

TEST_F(Misuse, UnmapOfAReservedButUnmappedRangeSucceeds) {
  // Measured (H200, driver 580.159.04): nothing mapped there, nothing to do, CUDA_SUCCESS.
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  EXPECT_CU(CU(cuMemUnmap, va, gran));
}

TEST_F(Misuse, UnmapOverMappedAndUnmappedPartsUnmapsTheMappedOnes) {
  // Measured (H200, driver 580.159.04): CUDA_SUCCESS, and the mapped piece is gone.
  CUdeviceptr va = 0, base = 0;
  std::size_t size = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, 3 * gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va + gran, gran, h));
  ASSERT_CU(grant_device(va + gran, gran));
  const CUresult r = CU(cuMemUnmap, va, 3 * gran);
  EXPECT_CU(r);
  if (r == CUDA_SUCCESS) {
    ASSERT_CU(mem_unmap(va + gran, gran)) << " (already unmapped: succeeds too)";
  }
  EXPECT_CU_EQ(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange_v2, &base, &size, va + gran));
  EXPECT_CU(mem_map(va + gran, gran, h));  // the range is a plain reservation again
}

TEST_F(Misuse, UnmapOfPartOfAMappingIsInvalidValue) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, 2 * gran));
  ASSERT_CU(mem_create(&h, 2 * gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, 2 * gran, h));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemUnmap, va + gran, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemUnmap, va, gran));
}

TEST_F(Misuse, UnmapOfAnUnreservedRangeIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(address_free(va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemUnmap, va, gran));
}

TEST_F(Misuse, AddressFreeOfAnUnknownRangeIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(address_free(va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree, va, gran));
}

TEST_F(Misuse, AddressFreeWithAnotherSizeThanReservedIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, 2 * gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree, va, gran));      // a part
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree, va, 4 * gran));  // more
}

// A reservation still mapped is not freed (measured: H200, driver 580.159.04): unmapping is the
// program's job. uvmpool counts the
// program's own handles until their last mapping is unmapped (src/pool/external_handles.h), and an
// address free that unmapped them unseen would leave them counted.
TEST_F(Misuse, AddressFreeOfARangeStillMappedIsInvalidValue) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree, va, gran));
  const std::vector<std::uint32_t> words = pattern(16, 5);
  ASSERT_CU(write_words(va, words));
  EXPECT_EQ(read_words(va, 16), words) << "the mapping is still there";
}

TEST_F(Misuse, SetAccessOnAnUnmappedRangeIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, grant_device(va, gran));
}

TEST_F(Misuse, SetAccessBeyondTheMappedPartIsInvalidValue) {
  // cuda.h: "The range must be a fully mapped address range".
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(address_reserve(&va, 2 * gran));
  ASSERT_CU(mem_create(&h, gran, pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0)));
  ASSERT_CU(mem_map(va, gran, h));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, grant_device(va, 2 * gran));
}

TEST_F(Misuse, RetainOnAnUnmappedAddressIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = CU(cuMemRetainAllocationHandle, &h, reinterpret_cast<void*>(va));
  if (r == CUDA_SUCCESS) track_handle(h);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r);
}

TEST_F(Misuse, MemsetD32AtAMisalignedAddressIsInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemsetD32_v2, p + 1, 0u, std::size_t{16}));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemsetD32_v2, p + 2, 0u, std::size_t{16}));
}

TEST_F(NoContext, AllocWithNoCurrentContextIsInvalidContext) {
  NoCurrentContext none;
  ASSERT_CU(none.result());
  CUcontext current = reinterpret_cast<CUcontext>(0x1);
  ASSERT_CU(CU(cuCtxGetCurrent, &current));
  ASSERT_EQ(current, nullptr);
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, mem_alloc(&p, kMiB));
}

TEST_F(NoContext, GetInfoWithNoCurrentContextIsInvalidContext) {
  NoCurrentContext none;
  ASSERT_CU(none.result());
  std::size_t free = 0, tot = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, CU(cuMemGetInfo_v2, &free, &tot));
}

TEST_F(NoContext, CreateWithNoCurrentContextSucceeds) {
  // NCCL creates its VMM buffers this way.
  CUmemGenericAllocationHandle h = 0;
  {
    NoCurrentContext none;
    ASSERT_CU(none.result());
    const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    std::size_t g = 0;
    EXPECT_CU(CU(cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(g, gran);
    ASSERT_CU(mem_create(&h, gran, prop));
  }
  // And the handle maps and works once a context is current.
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(mem_map(va, gran, h));
  ASSERT_CU(grant_device(va, gran));
  ASSERT_CU(CU(cuMemsetD32_v2, va, 6u, gran / 4));
  EXPECT_EQ(read_words(va + gran - 8, 2), std::vector<std::uint32_t>(2, 6u));
}

TEST_F(NoContext, ContextIsRestoredAfterwards) {
  { NoCurrentContext none; }
  CUcontext current = nullptr;
  ASSERT_CU(CU(cuCtxGetCurrent, &current));
  EXPECT_EQ(current, ctx);
}

// cudaEventRecord's documentation: "event and stream must be on the same CUDA context". The pool
// records its events for stream-ordered frees on the freeing stream, in that stream's context
// (cuStreamGetCtx), which the simulator checks by refusing an event of another context.
TEST_F(Misuse, AnEventIsRecordedOnlyOnAStreamOfItsOwnContext) {
  CUcontext other = nullptr;
  ASSERT_CU(CU(cuCtxCreate_v2, &other, 0u, dev));  // current now
  CUstream theirs = nullptr;
  const CUresult made = CU(cuStreamCreate, &theirs, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  CUcontext popped = nullptr;
  ASSERT_CU(CU(cuCtxPopCurrent_v2, &popped));
  EXPECT_EQ(popped, other);
  if (made == CUDA_SUCCESS) {
    CUcontext of = nullptr;
    EXPECT_CU(CU(cuStreamGetCtx, theirs, &of));
    EXPECT_EQ(of, other) << "cuStreamGetCtx names the stream's own context";
    EXPECT_CU(CU(cuStreamGetCtx, CUstream{nullptr}, &of));
    EXPECT_EQ(of, ctx) << "cuStreamGetCtx names the current context for the default stream";
    CUevent ours = nullptr;
    ASSERT_CU(CU(cuEventCreate, &ours, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING)));
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, CU(cuEventRecord, ours, theirs));
    EXPECT_CU(CU(cuEventRecord, ours, CUstream{nullptr}));
    EXPECT_CU(CU(cuEventSynchronize, ours));
    EXPECT_CU(CU(cuEventDestroy_v2, ours));
    EXPECT_CU(CU(cuStreamDestroy_v2, theirs));
  }
  EXPECT_CU(made);
  EXPECT_CU(CU(cuCtxDestroy_v2, other));
}

// Last on purpose (see the top of the file): a driver that let this copy reach the hardware would
// fault the context.
using MisuseLast = DriverTest;  // its own suite, so it runs after Misuse and NoContext

TEST_F(MisuseLast, CopyIntoAReservedButUnmappedAddressIsInvalidValue) {
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  std::vector<std::uint32_t> words(256, 1u);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, write_words(va, words));
}

TEST_F(MisuseLast, CopyIntoAnUnreservedAddressIsInvalidValue) {
  // Measured (H200, driver 580.159.04): refused up front, the context stays healthy.
  CUdeviceptr va = 0;
  ASSERT_CU(address_reserve(&va, gran));
  ASSERT_CU(address_free(va, gran));
  std::vector<std::uint32_t> words(256, 1u);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, write_words(va, words));
  EXPECT_CU(CU(cuCtxSynchronize));
}

}  // namespace
}  // namespace fidelity
