// Stream-ordered reuse when the budget is full, so that the memory freed on a held stream is the
// only memory there is: whoever gets it got exactly that memory.
//
// Expected (pool.h): the freeing stream reuses it at once; another stream, or a synchronous
// allocation, gets it only once the freeing stream's work has completed. Under pressure the pool may
// wait for that work (a wait call: cuStreamSynchronize, cuEventSynchronize or cuCtxSynchronize) and
// then succeed, or answer OUT_OF_MEMORY; both are accepted, and the test records which happened.
#include "pool_test.h"

namespace pooltest {
namespace {

class StreamPressure : public PoolTest {
 protected:
  static constexpr std::size_t kLimit = 32 * kMiB;
  static constexpr std::size_t kBlock = 4 * kMiB;

  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
    ASSERT_CU(drv().cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(drv().cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    pool = make_pool(limited_config(kLimit));
    // The whole budget in live allocations made on A: blocks, then single chunks for the rest.
    CUdeviceptr p = 0;
    while (pool->allocate_async(&p, kBlock, a) == CUDA_SUCCESS) blocks.push_back(p);
    ASSERT_GE(blocks.size(), 2u);
    while (pool->allocate_async(&p, gran, a) == CUDA_SUCCESS) live.push_back(p);
    ASSERT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate_async(&p, 1, a)) << " (the budget should be full)";
    // One block freed on A while A's work is held back.
    freed = blocks.back();
    blocks.pop_back();
    live.insert(live.end(), blocks.begin(), blocks.end());
    hold_stream(a, true);
    CUresult r = CUDA_ERROR_UNKNOWN;
    ASSERT_EQ(pool->deallocate_async(freed, a, &r), Ownership::Ours);
    ASSERT_CU(r);
  }

  void TearDown() override {
    for (CUstream s : {a, b})
      if (s != nullptr) hold_stream(s, false);
    if (pool) {
      for (CUdeviceptr p : live) must_free(*pool, p);
      pool.reset();
    }
    for (CUstream s : {a, b})
      if (s != nullptr) drv().cuStreamDestroy_v2(s);
    PoolTest::TearDown();
  }

  // The outcome of an allocation that may only get the held memory by waiting for A.
  void expect_waited_or_refused(CUresult r, CUdeviceptr p, unsigned long long waits_before, const char* what) {
    if (r == CUDA_SUCCESS) {
      live.push_back(p);
      EXPECT_GT(wait_calls(), waits_before) << what << " got memory freed on held stream A without waiting for A";
      EXPECT_CU(drv().cuStreamQuery(a)) << " (A's work must be complete once its memory is reused)";
      RecordProperty("outcome", "waited for the freeing stream");
    } else {
      EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r) << " (" << what << ")";
      RecordProperty("outcome", "OUT_OF_MEMORY");
    }
  }

  std::unique_ptr<Pool> pool;
  std::vector<CUdeviceptr> live;
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr freed = 0;
  CUstream a = nullptr;
  CUstream b = nullptr;
};

TEST_F(StreamPressure, TheFreeingStreamReusesHeldMemoryAtOnce) {
  const unsigned long long waits = wait_calls();
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, kBlock, a));
  live.push_back(p);
  EXPECT_EQ(p, freed);
  EXPECT_EQ(wait_calls(), waits) << "the freeing stream itself needs no wait";
}

TEST_F(StreamPressure, TheFreeingStreamReusesHeldMemoryForASmallerSize) {
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, kBlock / 2, a));
  live.push_back(p);
}

TEST_F(StreamPressure, AnotherStreamGetsHeldMemoryOnlyByWaitingForTheFreeingStream) {
  const unsigned long long waits = wait_calls();
  CUdeviceptr p = 0;
  const CUresult r = pool->allocate_async(&p, kBlock, b);
  expect_waited_or_refused(r, p, waits, "allocate_async on stream B");
}

TEST_F(StreamPressure, AnotherStreamGetsHeldChunksForAnotherSizeOnlyByWaiting) {
  // Not the cached mapping itself: its chunks, taken apart for a different size.
  const unsigned long long waits = wait_calls();
  CUdeviceptr p = 0;
  const CUresult r = pool->allocate_async(&p, kBlock / 2, b);
  expect_waited_or_refused(r, p, waits, "allocate_async of another size on stream B");
}

TEST_F(StreamPressure, ASynchronousAllocationGetsHeldMemoryOnlyByWaiting) {
  const unsigned long long waits = wait_calls();
  CUdeviceptr p = 0;
  const CUresult r = pool->allocate(&p, kBlock);
  expect_waited_or_refused(r, p, waits, "allocate");
}

TEST_F(StreamPressure, ASmallSynchronousAllocationGetsHeldChunksOnlyByWaiting) {
  const unsigned long long waits = wait_calls();
  CUdeviceptr p = 0;
  const CUresult r = pool->allocate(&p, 256);
  expect_waited_or_refused(r, p, waits, "allocate of 256 bytes (a new slab)");
}

TEST_F(StreamPressure, OnceTheFreeingStreamCompletesEveryoneGetsTheMemory) {
  hold_stream(a, false);
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, kBlock, b));
  live.push_back(p);
  EXPECT_EQ(p, freed);
  CUresult r = CUDA_ERROR_UNKNOWN;
  // Freed on B (not held): a synchronous allocation gets it.
  ASSERT_EQ(pool->deallocate_async(p, b, &r), Ownership::Ours);
  live.pop_back();
  ASSERT_CU(pool->allocate(&p, kBlock));
  live.push_back(p);
}

TEST_F(StreamPressure, ReleaseIdleKeepsMemoryFreedOnAHeldStream) {
  const std::size_t held_before = pool->stats(0).chunks_held;
  const std::size_t driver_before = driver_free();
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, held_before) << "memory a stream may still use was released";
  EXPECT_EQ(driver_free(), driver_before);
  hold_stream(a, false);
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, held_before - kBlock / gran) << "completed frees are idle memory";
}

}  // namespace
}  // namespace pooltest
