// Cached mappings cut and joined with no driver call (src/pool/cached_ranges.cpp): a request whose
// size no bin holds is served from freed mappings that lie side by side, and the excess stays cached.
#include <algorithm>
#include <random>
#include <thread>

#include "pool_test.h"

namespace pooltest {
namespace {

class Carve : public PoolTest {
 protected:
  // Allocations of these chunk counts, made one after another so that they lie side by side (the
  // tests check that before relying on it).
  std::vector<Block> side_by_side(Pool& pool, std::initializer_list<std::size_t> chunks) {
    std::vector<Block> out;
    std::uint64_t seed = 100;
    for (std::size_t n : chunks) {
      const CUdeviceptr p = must_allocate(pool, n * gran);
      fill(p, n * gran, seed);
      if (!out.empty()) {
        EXPECT_EQ(out.back().p + out.back().bytes, p) << "the pool no longer lays fresh mappings side by side";
      }
      out.push_back({p, n * gran, seed++});
    }
    return out;
  }
};

TEST_F(Carve, FreedNeighboursAreJoinedForALargerRequestWithNoDriverCall) {
  auto pool = make_pool();
  const auto b = side_by_side(*pool, {3, 5, 1});
  must_free(*pool, b[0].p);
  must_free(*pool, b[1].p);
  const DeviceStats before = pool->stats(0);
  sim().reset_counts();
  const CUdeviceptr p = must_allocate(*pool, 8 * gran - 100);
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(sim().call_count("cuMemUnmap"), 0u);
  EXPECT_EQ(p, b[0].p) << "served at the first neighbour's address";
  const DeviceStats after = pool->stats(0);
  EXPECT_EQ(after.mappings_carved - before.mappings_carved, 1u);
  EXPECT_EQ(after.chunks_held, before.chunks_held);
  EXPECT_EQ(after.chunks_cached, 0u);
  fill(p, 8 * gran - 100, 7);
  EXPECT_TRUE(holds(p, 8 * gran - 100, 7));
  EXPECT_TRUE(holds(b[2].p, b[2].bytes, b[2].seed)) << "the live neighbour was touched";
  // The joined allocation is one: its interior (the second neighbour's old address) is no allocation
  // of its own, and lookups answer the whole.
  const auto info = pool->find(b[1].p);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->base, p);
  EXPECT_EQ(info->size, 8 * gran - 100);
  CUresult r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate(b[1].p, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r);
  EXPECT_TRUE(holds(p, 8 * gran - 100, 7));
  must_free(*pool, p);
  must_free(*pool, b[2].p);
}

TEST_F(Carve, ALargerFreedMappingIsCutAndTheRestServesTheNextRequest) {
  auto pool = make_pool();
  const auto b = side_by_side(*pool, {8, 1});
  must_free(*pool, b[0].p);
  sim().reset_counts();
  const CUdeviceptr first = must_allocate(*pool, 3 * gran);
  EXPECT_EQ(first, b[0].p);
  EXPECT_EQ(pool->stats(0).chunks_cached, 5u) << "the rest stays a cached mapping";
  const CUdeviceptr second = must_allocate(*pool, 5 * gran);
  EXPECT_EQ(second, b[0].p + 3 * gran);
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(sim().call_count("cuMemUnmap"), 0u);
  fill(first, 3 * gran, 1);
  fill(second, 5 * gran, 2);
  EXPECT_TRUE(holds(first, 3 * gran, 1));
  EXPECT_TRUE(holds(second, 5 * gran, 2));
  EXPECT_TRUE(holds(b[1].p, b[1].bytes, b[1].seed));
  EXPECT_EQ(pool->stats(0).chunks_cached, 0u);
  must_free(*pool, first);
  must_free(*pool, second);
  // Both halves join again into the original size.
  sim().reset_counts();
  EXPECT_EQ(must_allocate(*pool, 8 * gran), b[0].p);
  EXPECT_EQ(vmm_build_calls(), 0u);
}

TEST_F(Carve, TheTightestWindowIsChosen) {
  auto pool = make_pool();
  // Free runs of 6 and of 2 + 2 chunks, each closed by a live chunk; a request of 4 takes the 2 + 2.
  const auto b = side_by_side(*pool, {6, 1, 2, 2, 1});
  for (int i : {0, 2, 3}) must_free(*pool, b[i].p);
  EXPECT_EQ(must_allocate(*pool, 4 * gran), b[2].p);
  EXPECT_EQ(pool->stats(0).chunks_cached, 6u);
}

TEST_F(Carve, MappingsThatDoNotMeetAreNotJoined) {
  auto pool = make_pool();
  const auto b = side_by_side(*pool, {2, 1, 2, 1});
  must_free(*pool, b[0].p);
  must_free(*pool, b[2].p);
  const DeviceStats before = pool->stats(0);
  const CUdeviceptr p = must_allocate(*pool, 4 * gran);
  fill(p, 4 * gran, 3);
  EXPECT_TRUE(holds(p, 4 * gran, 3));
  EXPECT_TRUE(holds(b[1].p, b[1].bytes, b[1].seed));
  EXPECT_TRUE(holds(b[3].p, b[3].bytes, b[3].seed));
  EXPECT_EQ(pool->stats(0).mappings_carved, before.mappings_carved);
  EXPECT_GT(pool->stats(0).stitched_maps, before.stitched_maps) << "stitched from their chunks instead";
}

TEST_F(Carve, MappingsHoldingHostChunksAreNeverJoined) {
  auto pool = make_pool(spill_config(8 * gran));
  pool->stop_background();
  const CUdeviceptr dev = must_allocate(*pool, 6 * gran);
  const CUdeviceptr mixed = must_allocate(*pool, 4 * gran);  // 2 device chunks, 2 host ones
  ASSERT_EQ(dev + 6 * gran, mixed) << "not side by side: the test would test nothing";
  ASSERT_GT(pool->stats(0).live_host_bytes, 0u);
  must_free(*pool, dev);
  must_free(*pool, mixed);
  const DeviceStats before = pool->stats(0);
  const CUdeviceptr p = must_allocate(*pool, 10 * gran);
  fill(p, 10 * gran, 3);
  EXPECT_TRUE(holds(p, 10 * gran, 3));
  EXPECT_EQ(pool->stats(0).mappings_carved, before.mappings_carved);
  must_free(*pool, p);
}

TEST_F(Carve, NoChunkIsLostAfterManyCutsAndJoins) {
  auto pool = make_pool();
  std::mt19937 rng(5);
  std::vector<Block> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.size() < 24 && (live.empty() || rng() % 3 != 0)) {
      const std::size_t bytes = (1 + rng() % 12) * gran - rng() % 1000;
      const CUdeviceptr p = must_allocate(*pool, bytes);
      ASSERT_NE(p, 0u);
      fill(p, bytes, step);
      live.push_back({p, bytes, static_cast<std::uint64_t>(step)});
    } else {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(holds_sampled(live[i].p, live[i].bytes, live[i].seed, gran));
      must_free(*pool, live[i].p);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) {
    EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
    must_free(*pool, b.p);
  }
  const DeviceStats s = pool->stats(0);
  EXPECT_GT(s.mappings_carved, 0u) << "nothing was cut or joined: the test tested nothing";
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.chunks_cached + s.chunks_free, s.chunks_held) << "chunks neither cached nor free after every free";
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
  EXPECT_EQ(driver_free(), free_at_start);
}

TEST_F(Carve, ThreadsCuttingAndJoiningAtOnceKeepEveryAllocationIntact) {
  auto pool = make_pool();
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (drv().cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        ++failures;
        return;
      }
      std::mt19937 rng(t);
      std::vector<Block> mine;
      for (int step = 0; step < 400; ++step) {
        if (mine.size() < 6 && (mine.empty() || rng() % 2 == 0)) {
          const std::size_t bytes = (1 + rng() % 6) * gran;
          CUdeviceptr p = 0;
          if (pool->allocate(&p, bytes) != CUDA_SUCCESS) {
            ++failures;
            continue;
          }
          const std::uint64_t seed = static_cast<std::uint64_t>(t) * 100000 + static_cast<std::uint64_t>(step);
          fill(p, bytes, seed);
          mine.push_back({p, bytes, seed});
        } else {
          const std::size_t i = rng() % mine.size();
          if (!holds_sampled(mine[i].p, mine[i].bytes, mine[i].seed, gran)) ++failures;
          CUresult r = CUDA_ERROR_UNKNOWN;
          if (pool->deallocate(mine[i].p, &r) != Ownership::Ours || r != CUDA_SUCCESS) ++failures;
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      for (const Block& b : mine) {
        if (!holds(b.p, b.bytes, b.seed)) ++failures;
        CUresult r = CUDA_ERROR_UNKNOWN;
        if (pool->deallocate(b.p, &r) != Ownership::Ours || r != CUDA_SUCCESS) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const DeviceStats s = pool->stats(0);
  EXPECT_GT(s.mappings_carved, 0u) << "nothing was cut or joined: the test tested nothing";
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.chunks_cached + s.chunks_free, s.chunks_held);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
}

}  // namespace
}  // namespace pooltest
