// The race detector: each way of changing memory under unfinished work is a violation that fails the
// work's context; the same change after a synchronize is not; memory the launch does not show
// (pointer arrays) counts; and the move protocol tiering will use (work held behind a value wait while
// its memory is remapped) is clean.
#include <thread>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using Race = KernelTest;

constexpr std::size_t kBytes = 4 * kMiB;

// A device VMM range of one handle, with read-write access for device 0.
struct Vmm {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  explicit Vmm(CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE) {
    EXPECT_CU(make_vmm(kBytes, pinned_prop(type, 0), &va, &handle));
  }
};

class Violations : public Race {
 protected:
  // A long kernel reading `p` on a stream of its own: unfinished for a long time by the host clock.
  void busy_reading(CUdeviceptr p) {
    ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(launch(kernel("uvmpool_touch"), stream, p, std::uint64_t{kBytes}, 1000u, 0u));
    before = uvmpool_sim_violations();
  }
  // One more violation than before, and the context unusable.
  void expect_caught() {
    EXPECT_EQ(uvmpool_sim_violations(), before + 1);
    EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
  }
  void expect_clean() {
    EXPECT_EQ(uvmpool_sim_violations(), before);
    EXPECT_CU(cuCtxSynchronize());
  }
  CUstream stream = nullptr;
  unsigned long long before = 0;
};

TEST_F(Violations, UnmapUnderAnUnfinishedKernel) {
  Vmm m;
  busy_reading(m.va);
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_caught();
}

TEST_F(Violations, UnmapAfterSynchronizeIsNone) {
  Vmm m;
  busy_reading(m.va);
  ASSERT_CU(cuStreamSynchronize(stream));
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_clean();
}

TEST_F(Violations, UnmapOnceTheHostClockPassedTheWorkIsNone) {
  Vmm m;
  busy_reading(m.va);
  uvmpool_sim_advance_host_ns(1'000'000'000);
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_clean();
}

TEST_F(Violations, ReleaseOfAHandleMappedUnderUnfinishedWork) {
  Vmm m;
  busy_reading(m.va);
  ASSERT_CU(cuMemRelease(m.handle));
  expect_caught();
}

TEST_F(Violations, ReleaseAfterSynchronizeIsNone) {
  Vmm m;
  busy_reading(m.va);
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemRelease(m.handle));
  expect_clean();
}

TEST_F(Violations, TakingTheDevicesAccessAway) {
  Vmm m;
  busy_reading(m.va);
  const CUmemAccessDesc none = access(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_CU(cuMemSetAccess(m.va, kBytes, &none, 1));
  expect_caught();
}

TEST_F(Violations, GrantingAccessIsNone) {
  Vmm m;
  busy_reading(m.va);
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemSetAccess(m.va, kBytes, &rw, 1));
  expect_clean();
}

// Each call that changes the range counts: the unmap, then the map of a new handle at the address.
TEST_F(Violations, MapAtAnAddressUnfinishedWorkTouched) {
  Vmm m;
  busy_reading(m.va);
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  EXPECT_EQ(uvmpool_sim_violations(), before + 1);
  CUmemGenericAllocationHandle fresh = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemCreate(&fresh, kBytes, &prop, 0));
  ASSERT_CU(cuMemMap(m.va, kBytes, 0, fresh, 0));
  before += 1;
  expect_caught();
}

TEST_F(Violations, FreeingTheAddressRange) {
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, kBytes, 0, 0, 0));
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  ASSERT_CU(cuMemMap(va, kBytes, 0, h, 0));
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemSetAccess(va, kBytes, &rw, 1));
  busy_reading(va);
  ASSERT_CU(cuMemUnmap(va, kBytes));
  EXPECT_EQ(uvmpool_sim_violations(), before + 1);
  ASSERT_CU(cuMemAddressFree(va, kBytes));
  before += 1;
  expect_caught();
}

// What one thread waited for is finished for every thread: another thread may act on it at once.
TEST_F(Violations, AnotherThreadsSynchronizeCoversThisThread) {
  Vmm m;
  busy_reading(m.va);
  std::thread([&] {
    EXPECT_CU(cuCtxSetCurrent(ctx));
    EXPECT_CU(cuStreamSynchronize(stream));
  }).join();
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_clean();
}

// The last release of a context waits for its work, as on a GPU: the next context may remap the
// addresses that work touched.
TEST_F(Violations, WorkOfAReleasedContextIsFinished) {
  Vmm m;
  busy_reading(m.va);
  const std::uint64_t t = uvmpool_sim_now_ns();
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  EXPECT_GT(uvmpool_sim_now_ns() - t, kBytes / 2);  // it waited: 1000 passes over kBytes at 1000 GB/s take kBytes ns
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
  ASSERT_CU(cuCtxSetCurrent(ctx));
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_clean();
}

TEST_F(Violations, WorkOnOtherMemoryIsNone) {
  Vmm busy, other;
  busy_reading(busy.va);
  ASSERT_CU(cuMemUnmap(other.va, kBytes));
  ASSERT_CU(cuMemRelease(other.handle));
  expect_clean();
}

// The gather kernel reads rows through pointers in device memory: an unmap of a row its arguments do
// not name is caught all the same.
TEST_F(Violations, MemoryReachedThroughAPointerArrayCounts) {
  Vmm row;
  CUdeviceptr table = 0, out = 0;
  ASSERT_CU(cuMemAlloc(&table, sizeof(CUdeviceptr)));
  ASSERT_CU(cuMemcpyHtoD(table, &row.va, sizeof row.va));
  ASSERT_CU(cuMemAlloc(&out, kBytes));
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(launch(kernel("uvmpool_touch"), stream, out, std::uint64_t{kBytes}, 1000u, 0u));  // keeps it busy
  ASSERT_CU(launch(kernel("uvmpool_gather_u32"), stream, table, std::uint64_t{1}, std::uint64_t{kBytes / 4}, out));
  before = uvmpool_sim_violations();
  ASSERT_CU(cuMemUnmap(row.va, kBytes));
  expect_caught();
}

// Pointers inside a by-value struct are followed too.
TEST_F(Violations, MemoryReachedThroughAByValueStructCounts) {
  Vmm target;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(launch(kernel("uvmpool_touch"), stream, target.va, std::uint64_t{kBytes}, 1000u, 0u));
  UvmpoolSimStructFill arg{};
  arg.p[3] = reinterpret_cast<std::uint32_t*>(target.va);
  arg.count = 16;
  before = uvmpool_sim_violations();
  ASSERT_CU(cuStreamSynchronize(stream));
  ASSERT_CU(launch(kernel("uvmpool_struct_fill_u32"), stream, arg));
  ASSERT_CU(cuMemUnmap(target.va, kBytes));
  expect_caught();
}

// Copies, memsets and value writes are work too.
TEST_F(Violations, AnUnfinishedCopyCounts) {
  Vmm m;
  CUdeviceptr other = 0;
  ASSERT_CU(cuMemAlloc(&other, kBytes));
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 8; ++i) ASSERT_CU(cuMemcpyDtoDAsync(other, m.va, kBytes, stream));
  before = uvmpool_sim_violations();
  ASSERT_CU(cuMemUnmap(m.va, kBytes));
  expect_caught();
}

// The protocol tiering relies on: a launch held behind a value wait, its memory moved to another
// handle at the same address (copy, unmap, map, access), then the value written. The kernel runs on
// the new memory, sees the moved data, and no violation is found.
TEST_F(Race, MovingMemoryUnderWorkHeldBehindAValueWaitIsClean) {
  void* flag_host = nullptr;
  ASSERT_CU(cuMemHostAlloc(&flag_host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  auto* flag = static_cast<std::uint32_t*>(flag_host);
  *flag = 0;
  CUdeviceptr flag_device = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&flag_device, flag_host, 0));

  Vmm x(CU_MEM_LOCATION_TYPE_HOST_NUMA);  // spilled: lives in host memory
  ASSERT_CU(cuMemsetD32(x.va, 5, kBytes / 4));
  uvmpool_sim_reset_clock();  // count the move's link bytes alone
  CUdeviceptr sum = 0;
  ASSERT_CU(cuMemAlloc(&sum, 8));
  CUstream compute = nullptr, copy = nullptr;
  ASSERT_CU(cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(compute, flag_device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(launch(kernel("uvmpool_sum_u32"), compute, x.va, std::uint64_t{kBytes / 4}, sum));

  // Promote: a device handle staged at a second address, copied into on a copy stream, then mapped at X.
  CUmemGenericAllocationHandle device = 0;
  const CUmemAllocationProp prop = pinned_prop(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemCreate(&device, kBytes, &prop, 0));
  CUdeviceptr staging = 0;
  ASSERT_CU(cuMemAddressReserve(&staging, kBytes, 0, 0, 0));
  ASSERT_CU(cuMemMap(staging, kBytes, 0, device, 0));
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_CU(cuMemSetAccess(staging, kBytes, &rw, 1));
  ASSERT_CU(cuMemcpyAsync(staging, x.va, kBytes, copy));
  ASSERT_CU(cuStreamSynchronize(copy));
  ASSERT_CU(cuMemUnmap(staging, kBytes));
  ASSERT_CU(cuMemUnmap(x.va, kBytes));
  ASSERT_CU(cuMemRelease(x.handle));
  ASSERT_CU(cuMemMap(x.va, kBytes, 0, device, 0));
  ASSERT_CU(cuMemSetAccess(x.va, kBytes, &rw, 1));
  __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);

  ASSERT_CU(cuStreamSynchronize(compute));
  EXPECT_EQ(uvmpool_sim_violations(), 0u);
  // The data crossed once, inward, on the copy engine; the kernel read HBM.
  EXPECT_EQ(uvmpool_sim_link_bytes(0, UVMPOOL_SIM_DEVICE_TO_HOST), 0u);
  EXPECT_EQ(uvmpool_sim_link_bytes(0, UVMPOOL_SIM_HOST_TO_DEVICE), kBytes);
  std::uint64_t total = 0;
  ASSERT_CU(cuMemcpyDtoH(&total, sum, 8));
  EXPECT_EQ(total, 5ull * (kBytes / 4));
}

}  // namespace
}  // namespace simtest
