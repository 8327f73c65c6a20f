// Several threads allocating and freeing at once, with allocations handed between threads through a
// queue (so most frees happen on another thread, and another stream, than the allocation), every
// allocation's contents checked before it is freed.
#include <atomic>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "pool_test.h"

namespace pooltest {
namespace {

struct Handed {
  Block block;
  int owner;  // the thread that made it
};

constexpr int kThreads = 4;
constexpr int kSteps = 700;

using Threads = PoolTest;

std::size_t random_size(std::mt19937_64& rng, std::size_t gran) {
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 70) return 1 + rng() % 4096;
  if (kind < 93) return 4096 + rng() % (kMiB + kMiB / 4);
  return gran / 2 + rng() % (2 * gran + gran / 2);
}

void run_threads(PoolTest* test, Pool& pool, CUcontext ctx, std::size_t gran, bool use_async) {
  std::vector<CUstream> streams(4);
  for (CUstream& s : streams) ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::mutex mu;
  std::deque<Handed> queue;
  std::atomic<bool> failed{false};
  std::atomic<std::uint64_t> next_seed{1};

  auto worker = [&](int id) {
    if (drv().cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuCtxSetCurrent in thread " << id;
      failed = true;
      return;
    }
    std::mt19937_64 rng(1000 + id);
    std::vector<Block> mine;
    CUstream stream = streams[static_cast<std::size_t>(id)];
    auto release = [&](const Block& b, int from) {
      if (auto r = holds(b.p, b.bytes, b.seed); !r) {
        ADD_FAILURE() << "thread " << id << " freeing an allocation of thread " << from << ": " << r.message();
        failed = true;
      }
      CUresult res = CUDA_ERROR_UNKNOWN;
      Ownership o = use_async && rng() % 2 ? pool.deallocate_async(b.p, stream, &res) : pool.deallocate(b.p, &res);
      if (o != Ownership::Ours || res != CUDA_SUCCESS) {
        ADD_FAILURE() << "thread " << id << ": free of 0x" << std::hex << b.p << std::dec << " answered "
                      << cu_name(res) << (o == Ownership::Ours ? "" : " (foreign)");
        failed = true;
      }
    };
    for (int step = 0; step < kSteps && !failed; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 5 || mine.empty()) {  // allocate
        const std::size_t bytes = random_size(rng, gran);
        CUdeviceptr p = 0;
        CUresult r = use_async && rng() % 2 ? pool.allocate_async(&p, bytes, stream) : pool.allocate(&p, bytes);
        if (r != CUDA_SUCCESS) {
          ADD_FAILURE() << "thread " << id << ": allocation of " << bytes << " bytes answered " << cu_name(r);
          failed = true;
          break;
        }
        const std::uint64_t seed = next_seed++;
        fill(p, bytes, seed);
        Block b{p, bytes, seed};
        std::lock_guard lock(mu);
        if (rng() % 2 && queue.size() < 64) {
          queue.push_back({b, id});
        } else {
          mine.push_back(b);
        }
      } else if (op < 8) {  // free one handed over by another thread (or one's own)
        std::optional<Handed> h;
        {
          std::lock_guard lock(mu);
          if (!queue.empty()) {
            h = queue.front();
            queue.pop_front();
          }
        }
        if (h) release(h->block, h->owner);
      } else {  // free one's own
        const std::size_t i = rng() % mine.size();
        release(mine[i], id);
        mine[i] = mine.back();
        mine.pop_back();
      }
      if (mine.size() > 24) {
        release(mine.front(), id);
        mine.erase(mine.begin());
      }
    }
    for (const Block& b : mine) release(b, id);
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();
  for (const Handed& h : queue) {
    EXPECT_TRUE(holds(h.block.p, h.block.bytes, h.block.seed));
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool.deallocate(h.block.p, &r), Ownership::Ours);
    EXPECT_CU(r);
  }
  for (CUstream s : streams) EXPECT_CU(drv().cuStreamSynchronize(s));
  for (CUstream s : streams) EXPECT_CU(drv().cuStreamDestroy_v2(s));
  (void)test;
}

TEST_F(Threads, ConcurrentAllocFreeWithCrossThreadFreesKeepsContents) {
  auto pool = make_pool();
  run_threads(this, *pool, ctx, gran, /*use_async=*/false);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_LE(s.chunks_free + s.chunks_cached, s.chunks_held);
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
  EXPECT_EQ(driver_free(), free_at_start) << "chunks leaked";
}

TEST_F(Threads, ConcurrentAsyncAllocFreeOnPerThreadStreamsKeepsContents) {
  auto pool = make_pool();
  run_threads(this, *pool, ctx, gran, /*use_async=*/true);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
  EXPECT_EQ(driver_free(), free_at_start) << "chunks leaked";
}

TEST_F(Threads, ConcurrentAllocFreeUnderATightBudgetNeverCorrupts) {
  // 48 MiB for four threads: allocations may be refused (OUT_OF_MEMORY), never wrong.
  auto pool = make_pool(limited_config(48 * kMiB));
  std::atomic<bool> failed{false};
  auto worker = [&](int id) {
    drv().cuCtxSetCurrent(ctx);
    std::mt19937_64 rng(77 + id);
    std::vector<Block> mine;
    for (int step = 0; step < 600 && !failed; ++step) {
      if (rng() % 2 || mine.empty()) {
        const std::size_t bytes = random_size(rng, gran) * (rng() % 4 == 0 ? 3 : 1);
        CUdeviceptr p = 0;
        const CUresult r = pool->allocate(&p, bytes);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) continue;
        if (r != CUDA_SUCCESS) {
          ADD_FAILURE() << "allocation answered " << cu_name(r);
          failed = true;
          break;
        }
        const std::uint64_t seed = (static_cast<std::uint64_t>(id) << 32) + step;
        fill(p, bytes, seed);
        mine.push_back({p, bytes, seed});
      } else {
        const std::size_t i = rng() % mine.size();
        if (auto ok = holds(mine[i].p, mine[i].bytes, mine[i].seed); !ok) {
          ADD_FAILURE() << ok.message();
          failed = true;
        }
        CUresult r = CUDA_ERROR_UNKNOWN;
        pool->deallocate(mine[i].p, &r);
        if (r != CUDA_SUCCESS) {
          ADD_FAILURE() << "free answered " << cu_name(r);
          failed = true;
        }
        mine[i] = mine.back();
        mine.pop_back();
      }
    }
    for (const Block& b : mine) {
      EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
      CUresult r = CUDA_ERROR_UNKNOWN;
      pool->deallocate(b.p, &r);
      EXPECT_CU(r);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_LE(s.peak_held_bytes, 48 * kMiB);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
}

}  // namespace
}  // namespace pooltest
