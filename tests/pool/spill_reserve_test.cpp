// The host reserve (docs/architecture.md, "The reserve"): once a device's pool passes half its
// budget, a background thread pins PoolConfig.host_reserve of host chunks and keeps that much ready,
// part loose (for allocations that straddle the device limit, and slabs) and the rest premapped into
// host-only runs, so a spill usually makes no driver call. Only an empty reserve pins on the
// allocation path. The target grows to twice the largest spill and falls back to the base after
// host_idle_ms without a spill; everything pinned, reserve included, counts against the host limit.
//
// The base used here, 128 MiB = 64 chunks, is large enough that the loose share is a quarter of it
// (16 chunks) and three quarters are premapped, as the design says.
#include <atomic>
#include <thread>

#include "driver/real_driver.h"
#include "pool/host_tier.h"
#include "spill_test.h"

namespace pooltest {
namespace {

using SpillReserve = SpillTest;

constexpr std::size_t kBase = 128 * kMiB;  // 64 chunks: 16 loose, 48 premapped

// Loose plus premapped: what is ready for the next spills.
std::uint64_t ready(const DeviceStats& s) { return s.host_chunks_reserve + s.host_chunks_premapped; }

TEST_F(SpillReserve, IsFilledByTheBackgroundThreadOnceTheDeviceIsHalfFull) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr a = must_allocate(*pool, 30 * kMiB);  // 15 chunks: just under half of 64 MiB
  EXPECT_FALSE(eventually([&] { return pool->stats(0).host_chunks_held != 0; }, 0.3))
      << "host memory pinned while the device is under half full";
  CUdeviceptr b = must_allocate(*pool, 2 * kMiB);  // 16 chunks: half
  EXPECT_TRUE(eventually([&] {
    const DeviceStats s = pool->stats(0);
    return s.host_chunks_held == 64 && s.host_chunks_reserve == 16 && s.host_chunks_premapped == 48;
  })) << "held " << pool->stats(0).host_chunks_held << ", loose " << pool->stats(0).host_chunks_reserve
      << ", premapped " << pool->stats(0).host_chunks_premapped << "; want 64 = 16 + 48";
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_mapped, 48u) << "premapped runs are mapped";
  EXPECT_EQ(s.host_chunks_pinned_inline, 0u) << "nothing spilled: only the thread pinned";
  EXPECT_EQ(s.spilled_allocations, 0u);
  EXPECT_EQ(s.live_host_bytes, 0u);
  must_free(*pool, a);
  must_free(*pool, b);
}

// The documented base is what is kept: a small one is not rounded up to the thread's batch.
TEST_F(SpillReserve, ASmallBaseIsKeptAsConfigured) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, 8 * kMiB));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  EXPECT_TRUE(eventually([&] { return pool->stats(0).host_chunks_held >= 4; }));
  EXPECT_FALSE(eventually([&] { return pool->stats(0).host_chunks_held > 4; }, 1.0))
      << "UVMPOOL_HOST_RESERVE=8M is 4 chunks; the thread pinned " << pool->stats(0).host_chunks_held;
  must_free(*pool, full);
}

TEST_F(SpillReserve, ASpillServedByAPremappedRunMakesNoDriverCall) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  ASSERT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }));
  pool->stop_background();  // from here only the allocation path calls the driver
  sim().reset_counts();
  CUdeviceptr p = must_allocate(*pool, 20 * kMiB);
  EXPECT_EQ(vmm_build_calls(), 0u) << "cuMemCreate " << sim().call_count("cuMemCreate") << ", cuMemMap "
                                   << sim().call_count("cuMemMap") << ", cuMemSetAccess "
                                   << sim().call_count("cuMemSetAccess");
  EXPECT_EQ(tiers(p, 20 * kMiB, gran), layout(0, 10));
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_premapped, 38u) << "the run was split: the rest stays premapped";
  EXPECT_EQ(s.host_chunks_pinned_inline, 0u);
  EXPECT_EQ(s.live_host_bytes, 20 * kMiB);
  fill(p, 20 * kMiB, 5);
  EXPECT_TRUE(holds(p, 20 * kMiB, 5));
  must_free(*pool, p);
  must_free(*pool, full);
}

// The allocation that straddles the device limit needs loose chunks: it maps them, but pins nothing.
TEST_F(SpillReserve, AStraddlingAllocationMapsLooseChunksWithoutPinning) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr a = must_allocate(*pool, 40 * kMiB);
  ASSERT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }));
  pool->stop_background();
  sim().reset_counts();
  const std::size_t dev = device_chunks(64 * kMiB) - 20;  // 11 device chunks left
  CUdeviceptr p = must_allocate(*pool, (dev + 4) * gran);
  EXPECT_EQ(tiers(p, (dev + 4) * gran, gran), layout(dev, 4));
  EXPECT_EQ(sim().call_count("cuMemCreate"), dev) << "the device chunks only: the host ones were pinned already";
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_pinned_inline, 0u);
  EXPECT_EQ(s.host_chunks_reserve, 12u);
  EXPECT_EQ(s.host_chunks_premapped, 48u);
  must_free(*pool, p);
  must_free(*pool, a);
}

// An empty reserve (the thread stopped before it pinned any): the spill pins exactly its shortfall
// inline, one cuMemCreate per chunk, and nothing beyond it.
TEST_F(SpillReserve, AnEmptyReservePinsExactlyTheShortfallInline) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  pool->stop_background();
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  EXPECT_EQ(pool->stats(0).host_chunks_held, 0u);
  sim().reset_counts();
  CUdeviceptr p = must_allocate(*pool, 12 * kMiB);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_pinned_inline, 6u);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 6u);
  EXPECT_EQ(s.host_chunks_held, 6u);
  EXPECT_EQ(s.host_chunks_reserve, 0u);
  EXPECT_EQ(tiers(p, 12 * kMiB, gran), layout(0, 6));
  must_free(*pool, p);
  must_free(*pool, full);
}

// host_reserve = 0: no pinning ahead at all; every spill pins inline.
TEST_F(SpillReserve, ReserveZeroPinsEverySpillInline) {
  auto pool = make_pool(spill_config(64 * kMiB, 128 * kMiB, 0));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  CUdeviceptr p = must_allocate(*pool, 12 * kMiB);
  EXPECT_EQ(pool->stats(0).host_chunks_pinned_inline, 6u);
  EXPECT_FALSE(eventually([&] { return pool->stats(0).host_chunks_held != 6; }, 0.3))
      << "something was pinned ahead: " << pool->stats(0).host_chunks_held << " chunks held";
  CUdeviceptr q = must_allocate(*pool, 12 * kMiB);
  EXPECT_EQ(pool->stats(0).host_chunks_pinned_inline, 12u);
  EXPECT_EQ(tiers(q, 12 * kMiB, gran), layout(0, 6));
  must_free(*pool, q);
  must_free(*pool, p);
  must_free(*pool, full);
}

// A host limit of exactly the request: the allocation pins what it needs, and then nothing more fits.
TEST_F(SpillReserve, UnderATightHostLimitOnlyWhatIsNeededIsPinned) {
  auto pool = make_pool(spill_config(64 * kMiB, 12 * kMiB, 0));
  pool->stop_background();  // else its pinning, once a second, can race the inline pin for the limit
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  sim().reset_counts();
  CUdeviceptr p = must_allocate(*pool, 12 * kMiB);
  EXPECT_EQ(pool->stats(0).host_chunks_pinned_inline, 6u);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 6u);
  EXPECT_EQ(pool->stats(0).host_chunks_held, 6u);
  CUdeviceptr q = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&q, 1));
  must_free(*pool, p);
  must_free(*pool, full);
}

// "Only an empty reserve pins inline": 64 chunks are ready (16 loose, 48 premapped in runs of 16),
// so a spill of 20 should pin nothing, though no single run covers it.
TEST_F(SpillReserve, ASpillLargerThanAnyRunPinsNothingWhileEnoughIsReady) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  ASSERT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }));
  pool->stop_background();
  sim().reset_counts();
  CUdeviceptr p = must_allocate(*pool, 40 * kMiB);
  EXPECT_EQ(tiers(p, 40 * kMiB, gran), layout(0, 20));
  EXPECT_EQ(pool->stats(0).host_chunks_pinned_inline, 0u);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 0u) << "pinned inline while 64 chunks were ready";
  must_free(*pool, p);
  must_free(*pool, full);
}

TEST_F(SpillReserve, IsRefilledAfterASpill) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  ASSERT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }));
  CUdeviceptr p = must_allocate(*pool, 20 * kMiB);  // 10 of the 64 ready chunks, from one run
  EXPECT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }))
      << "not refilled: " << ready(pool->stats(0)) << " chunks ready";
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_pinned_inline, 0u);
  EXPECT_EQ(s.host_chunks_held, 74u) << "10 in the allocation, 64 ready";
  must_free(*pool, p);
  must_free(*pool, full);
}

TEST_F(SpillReserve, GrowsToTwiceTheLargestSpillAndShrinksBackToItsBaseWhenIdle) {
  PoolConfig c = spill_config(64 * kMiB, 512 * kMiB, kBase);
  c.host_idle_ms = 300;
  auto pool = make_pool(c);
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  ASSERT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }));
  // A spill of 50 chunks: larger than any run, so it takes loose chunks and pins the rest inline.
  CUdeviceptr p = must_allocate(*pool, 100 * kMiB);
  EXPECT_EQ(tiers(p, 100 * kMiB, gran), layout(0, 50));
  EXPECT_TRUE(eventually([&] { return ready(pool->stats(0)) == 100; }))
      << ready(pool->stats(0)) << " chunks ready; want twice the spill, 100";
  // Freed, the spill's chunks become a premapped run too; once no spill has come for host_idle_ms,
  // all above the base goes back to the system.
  must_free(*pool, p);
  EXPECT_TRUE(eventually([&] {
    const DeviceStats s = pool->stats(0);
    return s.host_chunks_held == 64 && ready(s) == 64;
  }, 10.0)) << "held " << pool->stats(0).host_chunks_held << ", ready " << ready(pool->stats(0)) << "; base 64";
  EXPECT_GE(pool->stats(0).peak_host_held_bytes, 150 * gran);
  must_free(*pool, full);
}

TEST_F(SpillReserve, TheHostLimitCountsTheReserve) {
  auto pool = make_pool(spill_config(64 * kMiB, 16 * kMiB, 0));
  ASSERT_CU(pool->fill_host_reserve(0, 16 * kMiB));
  EXPECT_EQ(pool->stats(0).host_chunks_reserve, 8u);
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->fill_host_reserve(0, 18 * kMiB));
  EXPECT_EQ(pool->stats(0).host_chunks_held, 8u) << "a refused fill must pin nothing";
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 18 * kMiB));
  // A reserve filled by hand serves a spill without pinning.
  sim().reset_counts();
  p = must_allocate(*pool, 16 * kMiB);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 0u);
  EXPECT_EQ(pool->stats(0).host_chunks_pinned_inline, 0u);
  CUdeviceptr q = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&q, 1));
  must_free(*pool, p);
  must_free(*pool, full);
}

TEST_F(SpillReserve, ReleaseIdleAndDestructionGiveThePinnedMemoryBack) {
  auto pool = make_pool(spill_config(64 * kMiB, 128 * kMiB, 0));
  ASSERT_CU(pool->fill_host_reserve(0, 20 * kMiB));
  EXPECT_FALSE(host_memory_whole()) << "the reserve is pinned host memory";
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).host_chunks_held, 0u);
  EXPECT_EQ(pool->stats(0).host_chunks_reserve, 0u);
  EXPECT_TRUE(host_memory_whole()) << "release_idle left host chunks pinned";
  ASSERT_CU(pool->fill_host_reserve(0, 20 * kMiB));
  pool.reset();
  EXPECT_TRUE(host_memory_whole()) << "the pool was destroyed with its reserve still pinned";
}

// What release_idle gives back stays given back: the thread (it wakes once a second) does not pin the
// reserve again, nor land a refill it had in flight, until the device fills up again.
TEST_F(SpillReserve, StaysReleasedAfterReleaseIdleUntilTheDeviceFillsUpAgain) {
  auto pool = make_pool(spill_config(64 * kMiB, 512 * kMiB, kBase));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  CUdeviceptr p = must_allocate(*pool, 20 * kMiB);  // a spill: the thread refills behind it
  must_free(*pool, p);
  must_free(*pool, full);
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).host_chunks_held, 0u);
  EXPECT_FALSE(eventually([&] { return pool->stats(0).host_chunks_held != 0; }, 1.5))
      << "the reserve was pinned again after release_idle: " << pool->stats(0).host_chunks_held << " chunks";
  EXPECT_FALSE(pool->any_host_mapped());
  full = must_allocate(*pool, room(64 * kMiB));
  EXPECT_TRUE(eventually([&] { return ready(pool->stats(0)) == 64; }))
      << "not armed again by a full device: " << ready(pool->stats(0)) << " chunks ready";
  must_free(*pool, full);
}

// An allocation that fails while the thread has chunks in flight holds the thread off and tries again
// (DevicePool::with_pressure_relief). The hold waits for the batch in flight and then lets the
// thread start nothing, so it cannot take again what the retry needs; this is the race that once let
// an allocation of exactly what memory_info reported free fail under load.
TEST_F(SpillReserve, AHoldWaitsForTheBatchInFlightAndLetsTheThreadStartNothingUntilItEnds) {
  using uvmpool::pool::Chunk;
  using uvmpool::pool::HostReserve;
  auto pool = make_pool(spill_config(64 * kMiB));  // the driver, loaded and with a context
  uvmpool::pool::HostTier tier(drv(), 64 * kMiB, std::chrono::milliseconds(60'000));
  const uvmpool::pool::Vmm vmm(uvmpool::driver::fn(), 0);
  HostReserve reserve(vmm, tier, gran, 32 * gran);
  ASSERT_CU(reserve.fill(8));
  std::vector<Chunk> batch;
  ASSERT_EQ(reserve.take_ready(8, &batch), 8u) << "the thread's premap, in flight";

  std::atomic<bool> holding{false}, end{false};
  std::thread allocation([&] {
    HostReserve::Hold hold(reserve);
    holding = true;
    while (!end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_FALSE(eventually([&] { return holding.load(); }, 0.3)) << "the hold began with 8 chunks in flight";
  const std::uint64_t landings = reserve.landings();
  reserve.give_back(batch);  // the premap failed: its chunks back in the reserve, landed
  reserve.landed(batch.size());
  EXPECT_EQ(reserve.landings(), landings + 1) << "a landing not counted: the failed allocation would not retry";
  ASSERT_TRUE(eventually([&] { return holding.load(); })) << "the hold did not begin once the batch landed";

  std::vector<Chunk> more;
  EXPECT_EQ(reserve.take_ready(4, &more), 0u) << "the thread took chunks to premap during a hold";
  reserve.arm();  // the reserve now wants 32 chunks: the thread's upkeep would pin
  EXPECT_FALSE(reserve.upkeep()) << "the thread's upkeep ran during a hold";
  EXPECT_EQ(reserve.held(), 8u) << "pinned during a hold";
  end = true;
  allocation.join();

  EXPECT_EQ(reserve.take_ready(4, &more), 4u) << "still held off after the hold ended";
  reserve.give_back(more);
  reserve.landed(more.size());
  EXPECT_TRUE(reserve.upkeep());
  EXPECT_GT(reserve.held(), 8u) << "the upkeep pinned nothing after the hold ended";
  tier.stop();
}

// The same promise through the pool, many times over while the thread pins and premaps: what
// memory_info reports free is allocated at once, whatever the thread has in flight.
TEST_F(SpillReserve, WhatIsReportedFreeCanBeAllocatedWhileTheThreadWorks) {
  PoolConfig c = spill_config(64 * kMiB, 128 * kMiB, kBase);
  c.report_host = true;
  auto pool = make_pool(c);
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  for (int round = 0; round < 40; ++round) {
    // A spill of varying size: the thread refills and premaps behind it while the next request comes.
    CUdeviceptr p = must_allocate(*pool, (2 + round % 7 * 5) * kMiB);
    std::size_t free = 0, total = 0;
    ASSERT_CU(pool->memory_info(&free, &total));
    CUdeviceptr q = 0;
    ASSERT_CU(pool->allocate(&q, free)) << "round " << round << ": " << free << " bytes reported free";
    must_free(*pool, q);
    must_free(*pool, p);
  }
  must_free(*pool, full);
}

}  // namespace
}  // namespace pooltest
