// Budgets on a small simulated device (UVMPOOL_SIM_DEVICE_MEMORY=256M): PoolConfig.device_limit in
// bytes or percent caps the pool, and what the process allocates outside the pool counts against it
// (options.def: "Most device memory the process may use on each device, pool and others together").
// The simulator charges each active context some device memory (as a GPU does: 2 MiB here), so even
// an empty pool starts with `used_at_start` of the budget already taken by others.
#include "pool_test.h"

namespace pooltest {
namespace {

class Budget : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(total, 256 * kMiB) << "run under UVMPOOL_SIM_DEVICE_MEMORY=256M (as CTest does)";
    ASSERT_EQ(gran, 2 * kMiB);
    used_at_start = total - free_at_start;
    ASSERT_LT(used_at_start, 8 * kMiB) << "something already uses the device";
  }

  // What a budget leaves the pool once others' memory is counted.
  std::size_t room(std::size_t budget) const { return budget - used_at_start; }

  std::size_t info_free(Pool& pool) {
    std::size_t free = 0, tot = 0;
    EXPECT_CU(pool.memory_info(&free, &tot));
    return free;
  }
  std::size_t info_total(Pool& pool) {
    std::size_t free = 0, tot = 0;
    EXPECT_CU(pool.memory_info(&free, &tot));
    return tot;
  }

  // Allocates `bytes` at a time until the pool refuses; the refusal must be OUT_OF_MEMORY.
  std::vector<CUdeviceptr> fill_up(Pool& pool, std::size_t bytes) {
    std::vector<CUdeviceptr> got;
    for (int i = 0; i < 10000; ++i) {
      CUdeviceptr p = 0;
      CUresult r = pool.allocate(&p, bytes);
      if (r != CUDA_SUCCESS) {
        EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r);
        break;
      }
      got.push_back(p);
    }
    return got;
  }

  void free_all(Pool& pool, std::vector<CUdeviceptr>& v) {
    for (CUdeviceptr p : v) must_free(pool, p);
    v.clear();
  }

  std::size_t used_at_start = 0;
};

TEST_F(Budget, ByteLimitCapsThePoolWithOutOfMemory) {
  auto pool = make_pool(limited_config(64 * kMiB));
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  EXPECT_EQ(got.size(), room(64 * kMiB) / (8 * kMiB)) << "8 MiB allocations under a 64 MiB limit";
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.budget, 64 * kMiB);
  EXPECT_LE(s.chunks_held * s.chunk_size, 64 * kMiB);
  EXPECT_GE(s.out_of_memory, 1u);
  // A free makes room again.
  must_free(*pool, got.back());
  got.pop_back();
  CUdeviceptr p = 0;
  EXPECT_CU(pool->allocate(&p, 8 * kMiB));
  got.push_back(p);
  // Fill what is left (less than 8 MiB), then not a byte more.
  for (std::vector<CUdeviceptr> rest = fill_up(*pool, gran); !rest.empty(); rest.clear())
    got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 1));
  free_all(*pool, got);
}

TEST_F(Budget, PercentLimitIsAShareOfTheDevice) {
  PoolConfig c = test_config();
  c.device_limit = uvmpool::config::Size{0, 25.0, true};
  auto pool = make_pool(c);
  EXPECT_EQ(info_total(*pool), 64 * kMiB);
  std::vector<CUdeviceptr> got = fill_up(*pool, 4 * kMiB);
  EXPECT_EQ(got.size(), room(64 * kMiB) / (4 * kMiB)) << "4 MiB allocations under 25% of 256 MiB";
  EXPECT_EQ(pool->stats(0).budget, 64 * kMiB);
  free_all(*pool, got);
}

TEST_F(Budget, ALimitAboveTheDeviceIsTheDevice) {
  auto pool = make_pool(limited_config(1024 * kMiB));
  EXPECT_EQ(info_total(*pool), 256 * kMiB);
  std::vector<CUdeviceptr> got = fill_up(*pool, 16 * kMiB);
  EXPECT_EQ(got.size(), room(256 * kMiB) / (16 * kMiB));
  free_all(*pool, got);
}

TEST_F(Budget, OneRequestLargerThanTheBudgetIsOutOfMemoryAndChangesNothing) {
  auto pool = make_pool(limited_config(64 * kMiB));
  CUdeviceptr keep = must_allocate(*pool, 1000);
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 64 * kMiB + 1));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, std::size_t{1} << 40));
  // Sizes whose rounding overflows: refused (how is not measured on a GPU), nothing else.
  EXPECT_NE(pool->allocate(&p, SIZE_MAX), CUDA_SUCCESS);
  EXPECT_NE(pool->allocate(&p, SIZE_MAX - gran + 2), CUDA_SUCCESS);
  EXPECT_EQ(pool->stats(0).live_allocations, 1u);
  EXPECT_EQ(pool->stats(0).live_bytes, 1000u);
  // All that is left beside `keep`'s slab still works.
  CUdeviceptr big = 0;
  CUresult r = pool->allocate(&big, room(64 * kMiB) - gran);
  EXPECT_CU(r);
  if (r == CUDA_SUCCESS) must_free(*pool, big);
  must_free(*pool, keep);
}

TEST_F(Budget, MemoryInfoTotalIsTheBudgetAndFreeFallsAsAllocationsGrow) {
  auto pool = make_pool(limited_config(64 * kMiB));
  EXPECT_EQ(info_total(*pool), 64 * kMiB);
  EXPECT_EQ(info_free(*pool), room(64 * kMiB));
  std::vector<CUdeviceptr> got;
  std::size_t last = info_free(*pool);
  for (std::size_t i = 0; i < room(64 * kMiB) / (8 * kMiB); ++i) {
    got.push_back(must_allocate(*pool, 8 * kMiB - 100));
    const std::size_t now = info_free(*pool);
    EXPECT_LE(now + 8 * kMiB - 100, last) << "after allocation " << i;
    EXPECT_LE(now, room(64 * kMiB) - pool->stats(0).live_bytes);
    last = now;
  }
  EXPECT_LT(info_free(*pool), 8 * kMiB);
  // A small allocation too makes it fall.
  free_all(*pool, got);
  const std::size_t before_small = info_free(*pool);
  CUdeviceptr small = must_allocate(*pool, 1);
  EXPECT_LT(info_free(*pool), before_small);
  must_free(*pool, small);
  pool->release_idle();
  EXPECT_EQ(info_free(*pool), room(64 * kMiB));
}

TEST_F(Budget, FreedMemoryCountsAsFreeInMemoryInfo) {
  auto pool = make_pool(limited_config(64 * kMiB));
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  free_all(*pool, got);
  // Cached by the pool but reusable by the program: reported free.
  EXPECT_EQ(info_free(*pool), room(64 * kMiB));
}

// What cuMemGetInfo reports free, a program expects to get (PyTorch and JAX size their caches by it).
void expect_memory_info_free_can_be_allocated(Pool& pool, std::size_t gran) {
  CUdeviceptr keep = 0;
  ASSERT_CU(pool.allocate(&keep, 32 * kMiB));
  std::size_t free = 0, tot = 0;
  ASSERT_CU(pool.memory_info(&free, &tot));
  CUdeviceptr p = 0;
  const std::size_t ask = free / gran * gran;
  EXPECT_CU(pool.allocate(&p, ask)) << " (memory_info said " << (free >> 20) << " MiB free; asked for "
                                    << (ask >> 20) << " MiB)";
  CUresult r = CUDA_SUCCESS;
  if (p != 0) pool.deallocate(p, &r);
  pool.deallocate(keep, &r);
}

TEST_F(Budget, MemoryInfoFreeCanBeAllocated) {
  auto pool = make_pool();
  expect_memory_info_free_can_be_allocated(*pool, gran);
}

TEST_F(Budget, MemoryInfoFreeCanBeAllocatedWithHeadroom) {
  PoolConfig c = test_config();
  c.headroom = 64 * kMiB;
  auto pool = make_pool(c);
  expect_memory_info_free_can_be_allocated(*pool, gran);
}

TEST_F(Budget, HeadroomIsLeftFreeOnTheDevice) {
  PoolConfig c = test_config();
  c.headroom = 64 * kMiB;
  auto pool = make_pool(c);
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  EXPECT_EQ(got.size(), room(192 * kMiB) / (8 * kMiB)) << "256 MiB less 64 MiB of headroom, in 8 MiB allocations";
  EXPECT_GE(driver_free(), 64 * kMiB);
  free_all(*pool, got);
}

TEST_F(Budget, NativeAllocationsCountAgainstTheBudget) {
  auto pool = make_pool(limited_config(128 * kMiB));
  CUdeviceptr native = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&native, 48 * kMiB));
  EXPECT_EQ(info_total(*pool), 128 * kMiB);
  EXPECT_EQ(info_free(*pool), room(80 * kMiB)) << "128 MiB budget less 48 MiB the process took from the driver";
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  EXPECT_EQ(got.size(), room(80 * kMiB) / (8 * kMiB)) << "what is left of the budget, in 8 MiB allocations";
  EXPECT_CU(drv().cuMemFree_v2(native));
  // The room the native allocation took is the pool's again.
  CUdeviceptr p = 0;
  EXPECT_CU(pool->allocate(&p, 48 * kMiB));
  if (p != 0) got.push_back(p);
  free_all(*pool, got);
}

TEST_F(Budget, NativeAllocationsAtTheDevicesCapacityLeaveThePoolOnlyTheRest) {
  auto pool = make_pool();  // the whole device
  CUdeviceptr native = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&native, 200 * kMiB));
  EXPECT_EQ(info_free(*pool), room(56 * kMiB));
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  EXPECT_EQ(got.size(), room(56 * kMiB) / (8 * kMiB));
  free_all(*pool, got);
  EXPECT_CU(drv().cuMemFree_v2(native));
}

// The program's own cuMemCreate of device memory (spill off: test_config): what fits is created on
// the device, what does not is refused without touching the pool's live memory.
TEST_F(Budget, CreateExternalAcceptsWhatFitsAndRefusesWhatDoesNot) {
  auto pool = make_pool(limited_config(64 * kMiB));
  CUdeviceptr keep = must_allocate(*pool, 40 * kMiB);
  const std::size_t left = room(64 * kMiB) - 40 * kMiB;
  const CUmemAllocationProp prop = device_prop(0);
  const std::uint64_t oom = pool->stats(0).out_of_memory;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->create_external(&h, left + gran, &prop, 0));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->create_external(&h, 128 * kMiB, &prop, 0));
  EXPECT_GE(pool->stats(0).out_of_memory, oom + 1);
  EXPECT_EQ(driver_free(), free_at_start - 40 * kMiB) << "a refused creation must not reach the driver";
  ASSERT_CU(pool->create_external(&h, left, &prop, 0));
  EXPECT_EQ(driver_free(), free_at_start - 40 * kMiB - left) << "the handle is device memory";
  EXPECT_FALSE(pool->requested_properties(h).has_value()) << "placed where it was asked: nothing to remember";
  EXPECT_EQ(info_free(*pool), 0u);
  EXPECT_TRUE(pool->find(keep).has_value()) << "a refused creation must not touch live memory";
  release_external(*pool, h);
  EXPECT_EQ(info_free(*pool), left);
  must_free(*pool, keep);
}

TEST_F(Budget, CreateExternalReleasesIdleMemoryToMakeRoom) {
  auto pool = make_pool(limited_config(64 * kMiB));
  std::vector<CUdeviceptr> got = fill_up(*pool, 8 * kMiB);
  ASSERT_EQ(got.size(), 7u);
  CUdeviceptr keep = got.back();
  got.pop_back();
  free_all(*pool, got);  // 48 MiB cached
  const std::size_t driver_before = driver_free();
  const CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(pool->create_external(&h, 48 * kMiB, &prop, 0));
  // Idle chunks went back to the driver, which gave the memory to the program's handle: at most the
  // 3 chunks the budget had spare besides `keep`'s 4 may still be held.
  EXPECT_LE(pool->stats(0).chunks_held, 7u);
  EXPECT_EQ(driver_free() + (pool->stats(0).chunks_held - 4) * gran, driver_before)
      << "48 MiB cached went back and 48 MiB were created";
  // The handle counts against the budget from then on.
  EXPECT_LE(info_free(*pool), 8 * kMiB);
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 16 * kMiB));
  release_external(*pool, h);
  EXPECT_CU(pool->allocate(&p, 16 * kMiB));
  if (p != 0) must_free(*pool, p);
  must_free(*pool, keep);
}

TEST_F(Budget, ReleaseIdleRaisesTheDriversFreeMemoryBack) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 10; ++i) got.push_back(must_allocate(*pool, 10 * kMiB + 1));
  for (int i = 0; i < 100; ++i) got.push_back(must_allocate(*pool, 3000));
  EXPECT_LE(driver_free() + 110 * kMiB, free_at_start);
  free_all(*pool, got);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
}

TEST_F(Budget, UnderPressureCachedMappingsOfOtherSizesAreTakenApart) {
  auto pool = make_pool(limited_config(64 * kMiB));
  std::vector<CUdeviceptr> got = fill_up(*pool, 6 * kMiB);  // 10 of them: 60 MiB
  EXPECT_EQ(got.size(), room(64 * kMiB) / (6 * kMiB));
  free_all(*pool, got);
  // Cached 6 MiB mappings must not block other sizes.
  for (std::size_t bytes : {10 * kMiB, 30 * kMiB, 2 * kMiB, 100 * kKiB}) {
    std::vector<CUdeviceptr> more = fill_up(*pool, bytes);
    // Large: all but one allocation's worth; small: slot rounding may waste up to half.
    const std::size_t expected = bytes >= gran ? room(64 * kMiB) - bytes + 1 : 32 * kMiB;
    EXPECT_GE(more.size() * bytes, expected) << bytes << " bytes at a time";
    free_all(*pool, more);
  }
}

}  // namespace
}  // namespace pooltest
