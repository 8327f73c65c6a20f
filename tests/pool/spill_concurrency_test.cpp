// Spill under stream-ordered allocation and under threads: allocate_async takes host chunks past the
// budget like allocate, and four threads allocating and freeing mixed sizes well past the device
// limit (with the reserve thread pinning and releasing beside them) keep every allocation's bytes.
#include <atomic>
#include <random>
#include <thread>

#include "spill_test.h"

namespace pooltest {
namespace {

using SpillConcurrency = SpillTest;

TEST_F(SpillConcurrency, AsyncAllocationSpillsToo) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();  // the host figures below are exact
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr full = 0, p = 0;
  ASSERT_CU(pool->allocate_async(&full, room(64 * kMiB), stream));
  ASSERT_CU(pool->allocate_async(&p, 16 * kMiB + 3, stream));
  EXPECT_EQ(tiers(p, 16 * kMiB + 3, gran), layout(0, 9));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 16 * kMiB + 3);
  EXPECT_EQ(pool->stats(0).spilled_allocations, 1u);
  fill(p, 16 * kMiB + 3, 8);
  EXPECT_TRUE(holds(p, 16 * kMiB + 3, 8));
  // Freed on the stream, reused at once on the same stream: the same host mapping.
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
  EXPECT_CU(r);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u);
  CUdeviceptr q = 0;
  ASSERT_CU(pool->allocate_async(&q, 16 * kMiB + 3, stream));
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 16 * kMiB + 3);
  for (CUdeviceptr x : {q, full}) {
    EXPECT_EQ(pool->deallocate_async(x, stream, &r), Ownership::Ours);
    EXPECT_CU(r);
  }
  EXPECT_CU(drv().cuStreamSynchronize(stream));
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u);
  EXPECT_CU(drv().cuStreamDestroy_v2(stream));
}

// A slot of a host slab freed on a stream and reused at once on it: its bytes are host bytes again.
TEST_F(SpillConcurrency, AsyncReuseOfAHostSlotCountsItsHostBytes) {
  auto pool = make_pool(spill_config(64 * kMiB));
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  CUdeviceptr p = 0, q = 0;
  ASSERT_CU(pool->allocate_async(&p, 1000, stream));
  EXPECT_EQ(tier_at(p), 'H');
  EXPECT_EQ(pool->stats(0).live_host_bytes, 1000u);
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u);
  ASSERT_CU(pool->allocate_async(&q, 1000, stream));
  EXPECT_EQ(q, p) << "the slot freed on this stream";
  EXPECT_EQ(pool->stats(0).live_host_bytes, 1000u);
  EXPECT_EQ(pool->deallocate_async(q, stream, &r), Ownership::Ours);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u) << "(a wrapped-around figure means the reuse did not count it)";
  EXPECT_CU(drv().cuStreamSynchronize(stream));
  must_free(*pool, full);
  EXPECT_CU(drv().cuStreamDestroy_v2(stream));
}

std::size_t random_size(std::mt19937_64& rng, std::size_t gran) {
  const int kind = static_cast<int>(rng() % 10);
  if (kind < 3) return 1 + rng() % 4096;                     // slab
  if (kind < 5) return 4096 + rng() % kMiB;                  // slab, larger classes
  return gran + rng() % (3 * gran);                          // 1 to 4 chunks, stitched
}

void run_threads(Pool& pool, CUcontext ctx, std::size_t gran, bool use_async,
                 std::atomic<std::uint64_t>& most_host) {
  constexpr int kThreads = 4;
  constexpr int kSteps = 400;
  constexpr std::size_t kKeep = 24;  // live allocations per thread at most: ~4 x 24 x 3 MiB in all
  std::atomic<bool> failed{false};
  std::atomic<std::uint64_t> next_seed{1};
  auto worker = [&](int id) {
    if (drv().cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuCtxSetCurrent in thread " << id;
      failed = true;
      return;
    }
    CUstream stream = nullptr;
    if (use_async && drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuStreamCreate in thread " << id;
      failed = true;
      return;
    }
    std::mt19937_64 rng(77 + id);
    std::vector<Block> mine;
    auto release = [&](std::size_t i) {
      const Block b = mine[i];
      mine[i] = mine.back();
      mine.pop_back();
      if (auto r = holds_sampled(b.p, b.bytes, b.seed, gran); !r) {
        ADD_FAILURE() << "thread " << id << ": " << r.message();
        failed = true;
      }
      CUresult res = CUDA_ERROR_UNKNOWN;
      const Ownership o = use_async ? pool.deallocate_async(b.p, stream, &res) : pool.deallocate(b.p, &res);
      if (o != Ownership::Ours || res != CUDA_SUCCESS) {
        ADD_FAILURE() << "thread " << id << ": free of 0x" << std::hex << b.p << std::dec << " answered " << cu_name(res);
        failed = true;
      }
    };
    for (int step = 0; step < kSteps && !failed; ++step) {
      if (mine.size() < kKeep && (mine.empty() || rng() % 3 != 0)) {
        const std::size_t bytes = random_size(rng, gran);
        CUdeviceptr p = 0;
        const CUresult r = use_async ? pool.allocate_async(&p, bytes, stream) : pool.allocate(&p, bytes);
        if (r != CUDA_SUCCESS) {
          ADD_FAILURE() << "thread " << id << ": allocation of " << bytes << " bytes answered " << cu_name(r);
          failed = true;
          break;
        }
        const std::uint64_t seed = next_seed++;
        fill(p, bytes, seed);
        mine.push_back({p, bytes, seed});
      } else {
        release(rng() % mine.size());
      }
      const std::uint64_t host = pool.stats(0).live_host_bytes;
      for (std::uint64_t m = most_host.load(); host > m && !most_host.compare_exchange_weak(m, host);) {
      }
    }
    for (const Block& b : mine)
      if (auto r = holds(b.p, b.bytes, b.seed); !r) ADD_FAILURE() << "thread " << id << " at the end: " << r.message();
    while (!mine.empty()) release(mine.size() - 1);
    if (stream != nullptr) {
      drv().cuStreamSynchronize(stream);
      drv().cuStreamDestroy_v2(stream);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();
}

class SpillThreads : public SpillTest, public ::testing::WithParamInterface<bool> {};

TEST_P(SpillThreads, FourThreadsPastTheDeviceLimitKeepEveryAllocationsBytes) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, 16 * kMiB));
  std::atomic<std::uint64_t> most_host{0};
  run_threads(*pool, ctx, gran, GetParam(), most_host);
  pool->stop_background();  // so the figures below hold still
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_GT(s.spilled_allocations, 0u) << "the threads never went past the device limit: the test is too small";
  EXPECT_GT(most_host.load(), 32 * kMiB);
  EXPECT_LE(s.peak_host_held_bytes, 512 * kMiB);
  EXPECT_EQ(s.host_chunks_held, s.host_chunks_reserve + s.host_chunks_mapped);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u);
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

INSTANTIATE_TEST_SUITE_P(Pool, SpillThreads, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Async" : "Sync"; });

}  // namespace
}  // namespace pooltest
