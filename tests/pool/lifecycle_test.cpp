// Contexts, the process's pool, abandon() after fork, and the PoolConfig knobs.
#include "config/leak_marker.h"
#include "pool_test.h"

namespace pooltest {
namespace {

using Lifecycle = PoolTest;

TEST_F(Lifecycle, WithoutACurrentContextAllocateIsInvalidContext) {
  auto pool = make_pool();
  ASSERT_CU(drv().cuCtxSetCurrent(nullptr));
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, pool->allocate(&p, 1000));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, pool->allocate(&p, 3 * gran));
  std::size_t free = 0, tot = 0;
  EXPECT_NE(pool->memory_info(&free, &tot), CUDA_SUCCESS);
  ASSERT_CU(drv().cuCtxSetCurrent(ctx));
}

TEST_F(Lifecycle, FreeAndFindWorkWithoutACurrentContext) {
  // NCCL and PyTorch free from threads that have no context current.
  auto pool = make_pool();
  CUdeviceptr small = must_allocate(*pool, 1000);
  CUdeviceptr large = must_allocate(*pool, 3 * gran);
  ASSERT_CU(drv().cuCtxSetCurrent(nullptr));
  EXPECT_TRUE(pool->find(small).has_value());
  EXPECT_EQ(pool->find(large).value().context, ctx);
  must_free(*pool, small);
  must_free(*pool, large);
  ASSERT_CU(drv().cuCtxSetCurrent(ctx));
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
}

TEST_F(Lifecycle, ProcessPoolIsMadeOnceAndKept) {
  Pool* before = Pool::existing();
  if (before == nullptr) {
    EXPECT_EQ(Pool::existing(), nullptr) << "existing() must not make the pool";
  }
  Pool* p = Pool::process();
  ASSERT_NE(p, nullptr) << "there is a driver (the simulator)";
  if (before != nullptr) {
    EXPECT_EQ(p, before);
  }
  EXPECT_EQ(Pool::process(), p);
  EXPECT_EQ(Pool::existing(), p);
}

TEST_F(Lifecycle, AbandonMakesNoDriverCall) {
  auto pool = make_pool();
  must_allocate(*pool, 1000);
  must_allocate(*pool, 3 * gran);
  must_free(*pool, must_allocate(*pool, 5 * gran));
  sim().reset_counts();
  pool->abandon();
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(sim().call_count("cuEventDestroy") + sim().call_count("cuMemFree"), 0u);
  // As after fork: the abandoned pool is never used again, nor destroyed.
  uvmpool::config::intentionally_leaked(pool.release());
}

TEST_F(Lifecycle, AnAbandonedPoolCanBeDestroyedWithoutDriverCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto pool = make_pool();
        must_allocate(*pool, 1000);
        must_allocate(*pool, 3 * gran);
        sim().reset_counts();
        pool->abandon();
        pool.reset();
        std::exit(vmm_build_calls() == 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Lifecycle, ChunkSizeAboveTheGranularityIsUsed) {
  PoolConfig c = test_config();
  c.chunk_size = 4 * gran;
  auto pool = make_pool(c);
  std::vector<Block> live;
  for (std::size_t bytes : {std::size_t{1}, 2 * gran, 4 * gran + 1, 9 * gran}) {
    CUdeviceptr p = must_allocate(*pool, bytes);
    fill(p, bytes, bytes);
    live.push_back({p, bytes, bytes});
  }
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunk_size, 4 * gran);
  EXPECT_EQ(free_at_start - driver_free(), s.chunks_held * s.chunk_size);
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  for (const Block& b : live) must_free(*pool, b.p);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
}

TEST_F(Lifecycle, SmallMaxSendsLargerRequestsToTheirOwnChunks) {
  PoolConfig c = test_config();
  c.small_max = 4096;
  auto pool = make_pool(c);
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < 10; ++i) live.push_back(must_allocate(*pool, 8192));
  EXPECT_EQ(pool->stats(0).chunks_held, 10u) << "8 KiB requests above small_max = 4 KiB each take a chunk";
  for (int i = 0; i < 10; ++i) live.push_back(must_allocate(*pool, 4096));
  EXPECT_LE(pool->stats(0).chunks_held, 11u) << "4 KiB requests share a slab";
  for (CUdeviceptr p : live) must_free(*pool, p);
}

}  // namespace
}  // namespace pooltest
