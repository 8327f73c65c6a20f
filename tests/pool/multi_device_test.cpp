// Two simulated devices (UVMPOOL_SIM_DEVICES=2): allocations belong to the device of the context
// current when they were made, whatever context is current when they are freed (FACTS.md: "record
// the device on each allocation; do not assume the current context at free time").
#include "pool_test.h"

#include "pool/peer_access.h"
#include "sim/sim_control.h"

namespace pooltest {
namespace {

class MultiDevice : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(device_count(), 2) << "run under UVMPOOL_SIM_DEVICES=2 (as CTest does)";
  }
  void use(int device) { ASSERT_CU(drv().cuCtxSetCurrent(context(device))); }

  // The device whose memory backs p, as the driver sees it.
  int physical_device(CUdeviceptr p) {
    CUmemGenericAllocationHandle h = 0;
    if (drv().cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(p)) != CUDA_SUCCESS) return -1;
    CUmemAllocationProp prop{};
    const CUresult r = drv().cuMemGetAllocationPropertiesFromHandle(&prop, h);
    drv().cuMemRelease(h);
    return r == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop.location.id : -1;
  }
};

TEST_F(MultiDevice, AllocationsRecordTheDeviceAndContextCurrentWhenMade) {
  auto pool = make_pool();
  std::vector<std::pair<CUdeviceptr, int>> made;
  for (int device : {0, 1}) {
    use(device);
    for (std::size_t bytes : {std::size_t{256}, std::size_t{70000}, 3 * gran + 1}) {
      CUdeviceptr p = must_allocate(*pool, bytes);
      ASSERT_NE(p, 0u);
      auto info = pool->find(p);
      ASSERT_TRUE(info.has_value());
      EXPECT_EQ(info->device, device) << bytes << " bytes";
      EXPECT_EQ(info->context, context(device)) << bytes << " bytes";
      EXPECT_EQ(physical_device(p), device) << bytes << " bytes: the memory itself is on the other device";
      fill(p, bytes, device * 10 + bytes);
      made.push_back({p, device});
    }
  }
  EXPECT_EQ(pool->stats(0).live_allocations, 3u);
  EXPECT_EQ(pool->stats(1).live_allocations, 3u);
  // find answers the same whatever context is current.
  use(0);
  for (auto [p, device] : made) EXPECT_EQ(pool->find(p).value().device, device);
  for (auto [p, device] : made) must_free(*pool, p);
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->stats(1).live_allocations, 0u);
}

// A kernel of device_1 (a context of device 1) sums `count` u32 at p (by the simulator's catalog kernel); the context's
// error if it faulted.
CUresult sum_on(CUcontext device_1, CUdeviceptr p, std::uint64_t count, std::uint64_t* total) {
  const Table& d = drv();
  if (CUresult r = d.cuCtxSetCurrent(device_1); r != CUDA_SUCCESS) return r;
  static CUfunction sum = [&d] {
    CUmodule m = nullptr;
    CUfunction f = nullptr;
    if (d.cuModuleLoadData(&m, UVMPOOL_SIM_MODULE_IMAGE) == CUDA_SUCCESS) d.cuModuleGetFunction(&f, m, "uvmpool_sum_u32");
    return f;
  }();
  if (sum == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUdeviceptr out = 0;
  if (CUresult r = d.cuMemAlloc_v2(&out, 8); r != CUDA_SUCCESS) return r;  // the driver's own: device 1
  void* params[] = {&p, &count, &out, nullptr};
  CUresult r = d.cuLaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
  if (r == CUDA_SUCCESS) r = d.cuCtxSynchronize();
  if (r == CUDA_SUCCESS) r = d.cuMemcpyDtoH_v2(total, out, 8);
  d.cuMemFree_v2(out);
  return r;
}

// cuCtxEnablePeerAccess reaches the peer's cuMemAlloc memory, not VMM mappings: the hook tells
// PeerAccess (src/pool/peer_access.h), which gives device 1 access to device 0's pool memory mapped
// before the call and after it (a stitched range, a slab slot, one made after).
TEST_F(MultiDevice, PeerAccessReachesPoolMemoryMappedBeforeAndAfterItIsEnabled) {
  auto pool = make_pool();
  use(0);
  const CUdeviceptr stitched = must_allocate(*pool, 3 * gran), slot = must_allocate(*pool, 4096);
  ASSERT_CU(drv().cuMemsetD32_v2(stitched, 2, 3 * gran / 4));
  ASSERT_CU(drv().cuMemsetD32_v2(slot, 5, 1024));
  use(1);
  ASSERT_CU(drv().cuCtxEnablePeerAccess(context(0), 0));
  uvmpool::pool::PeerAccess::get().enabled(drv(), 1, 0);  // what the cuCtxEnablePeerAccess hook does next
  EXPECT_EQ(uvmpool::pool::PeerAccess::get().peers_of(0), 0b10u);
  use(0);
  const CUdeviceptr after = must_allocate(*pool, 5 * gran);
  ASSERT_CU(drv().cuMemsetD32_v2(after, 7, 5 * gran / 4));
  std::uint64_t total = 0;
  ASSERT_CU(sum_on(context(1), stitched, 3 * gran / 4, &total));
  EXPECT_EQ(total, 2 * (3 * gran / 4));
  ASSERT_CU(sum_on(context(1), slot, 1024, &total));
  EXPECT_EQ(total, 5u * 1024);
  ASSERT_CU(sum_on(context(1), after, 5 * gran / 4, &total));
  EXPECT_EQ(total, 7 * (5 * gran / 4));
  use(1);
  ASSERT_CU(drv().cuCtxDisablePeerAccess(context(0)));
  uvmpool::pool::PeerAccess::get().disabled(drv(), 1, 0);
  EXPECT_EQ(uvmpool::pool::PeerAccess::get().peers_of(0), 0u);
  use(0);
  for (CUdeviceptr p : {stitched, slot, after}) must_free(*pool, p);
}

TEST_F(MultiDevice, FreeingUnderTheOtherDevicesContextWorks) {
  auto pool = make_pool();
  for (int device : {0, 1}) {
    SCOPED_TRACE("allocated on device " + std::to_string(device));
    use(device);
    std::vector<Block> blocks;
    for (std::size_t bytes : {std::size_t{512}, 2 * gran}) {
      CUdeviceptr p = must_allocate(*pool, bytes);
      fill(p, bytes, bytes);
      blocks.push_back({p, bytes, bytes});
    }
    use(1 - device);
    for (const Block& b : blocks) {
      EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
      must_free(*pool, b.p);
    }
    EXPECT_EQ(pool->stats(device).live_allocations, 0u);
    EXPECT_EQ(pool->stats(device).live_bytes, 0u);
    // The freed memory went back to its own device's pool: reused there.
    use(device);
    const unsigned long long vmm = vmm_build_calls();
    CUdeviceptr p = must_allocate(*pool, 2 * gran);
    EXPECT_EQ(vmm_build_calls(), vmm) << "the freed mapping was not cached by its own device";
    EXPECT_EQ(pool->find(p).value().device, device);
    must_free(*pool, p);
  }
}

TEST_F(MultiDevice, AsyncFreeOnAnotherDevicesStreamWorks) {
  auto pool = make_pool();
  use(1);
  CUdeviceptr p = must_allocate(*pool, 3 * gran);
  use(0);
  CUstream s0 = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool->deallocate_async(p, s0, &r), Ownership::Ours);
  EXPECT_CU(r);
  EXPECT_EQ(pool->stats(1).live_allocations, 0u);
  EXPECT_CU(drv().cuStreamDestroy_v2(s0));
}

// cuMemAllocAsync serves "from the memory pool current to the stream's device": a stream of device 1
// gets device 1's memory while a context of device 0 is current, and the current context stays.
TEST_F(MultiDevice, AsyncAllocationOnAnotherDevicesStreamComesFromThatDevice) {
  auto pool = make_pool();
  use(1);
  CUstream s1 = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  use(0);
  for (std::size_t bytes : {std::size_t{256}, std::size_t{70000}, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    CUdeviceptr p = 0;
    ASSERT_CU(pool->allocate_async(&p, bytes, s1));
    const auto info = pool->find(p);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->device, 1);
    EXPECT_EQ(info->context, context(1));
    EXPECT_EQ(physical_device(p), 1) << "the memory itself is not on the stream's device";
    CUcontext current = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&current));
    EXPECT_EQ(current, context(0)) << "the current context changed";
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool->deallocate_async(p, s1, &r), Ownership::Ours);
    EXPECT_CU(r);
  }
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->stats(1).live_allocations, 0u);
  EXPECT_CU(drv().cuStreamDestroy_v2(s1));
}

// A free on a stream of another context than the current one is put behind an event of the
// stream's context (the simulator, as the driver, refuses an event of another context): not
// reused elsewhere while that stream's work is held, and no context is waited for instead. Device 1's
// memory is freed on streams of both contexts in turn, so its spare events of one context are offered
// to the other's streams unless they are kept apart.
TEST_F(MultiDevice, AsyncFreeOnAnotherContextsStreamIsFencedOnThatStream) {
  REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
  auto pool = make_pool();
  CUstream s[2] = {};
  for (int device : {0, 1}) {
    use(device);
    ASSERT_CU(drv().cuStreamCreate(&s[device], CU_STREAM_NON_BLOCKING));
  }
  sim().reset_counts();
  for (int round = 0; round < 2; ++round) {
    for (int stream_device : {0, 1}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", a stream of device " + std::to_string(stream_device));
      use(1);  // device 1's memory, freed on a stream of either device
      CUdeviceptr p = must_allocate(*pool, 3 * gran);
      hold_stream(s[stream_device], true);
      CUresult r = CUDA_ERROR_UNKNOWN;
      ASSERT_EQ(pool->deallocate_async(p, s[stream_device], &r), Ownership::Ours);
      ASSERT_CU(r);
      CUdeviceptr q = must_allocate(*pool, 3 * gran);  // collects: the free gets its event now
      EXPECT_NE(q, p) << "memory freed on a held stream was handed out";
      hold_stream(s[stream_device], false);
      ASSERT_CU(drv().cuStreamSynchronize(s[stream_device]));
      CUdeviceptr again = must_allocate(*pool, 3 * gran);  // collects: the event done, a spare
      EXPECT_EQ(again, p) << "the free's event completed, yet its memory was not reused";
      must_free(*pool, q);
      must_free(*pool, again);
    }
  }
  EXPECT_EQ(sim().call_count("cuCtxSynchronize"), 0u) << "an event could not be recorded: a context was waited for instead";
  for (CUstream stream : s) EXPECT_CU(drv().cuStreamDestroy_v2(stream));
}

TEST_F(MultiDevice, EachDeviceHasItsOwnBudgetAndMemoryInfo) {
  auto pool = make_pool(limited_config(64 * kMiB));
  std::vector<std::pair<CUdeviceptr, int>> made;
  for (int device : {0, 1}) {
    use(device);
    // Each context takes a little of its device (2 MiB in the simulator): not the pool's.
    const std::size_t others = driver_total() - driver_free();
    std::size_t count = 0;
    for (CUdeviceptr p = 0; pool->allocate(&p, 8 * kMiB) == CUDA_SUCCESS; ++count) made.push_back({p, device});
    EXPECT_EQ(count, (64 * kMiB - others) / (8 * kMiB)) << "device " << device;
    std::size_t free = 1, tot = 0;
    ASSERT_CU(pool->memory_info(&free, &tot));
    EXPECT_EQ(tot, 64 * kMiB);
    EXPECT_LT(free, 8 * kMiB);
  }
  EXPECT_EQ(pool->stats(0).budget, 64 * kMiB);
  EXPECT_EQ(pool->stats(1).budget, 64 * kMiB);
  EXPECT_EQ(pool->device_count(), 2);
  for (auto [p, device] : made) must_free(*pool, p);
  pool->release_idle();
  for (int device : {0, 1}) {
    use(device);
    EXPECT_EQ(pool->stats(device).chunks_held, 0u);
    EXPECT_LE(driver_total() - driver_free(), 4 * kMiB) << "device " << device << ": the pool's chunks were not released";
  }
}

// The device named in the properties is charged, whatever context is current.
TEST_F(MultiDevice, CreateExternalChargesTheNamedDevice) {
  auto pool = make_pool(limited_config(64 * kMiB));
  use(1);
  CUdeviceptr p = must_allocate(*pool, 48 * kMiB);
  use(0);
  const CUmemAllocationProp on0 = device_prop(0), on1 = device_prop(1);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(pool->create_external(&h, 48 * kMiB, &on0, 0)) << " (device 0 is empty)";
  CUmemGenericAllocationHandle refused = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->create_external(&refused, 32 * kMiB, &on1, 0))
      << " (device 1 holds 48 MiB)";
  if (h != 0) release_external(*pool, h);
  must_free(*pool, p);
}

}  // namespace
}  // namespace pooltest
