// Spill: past the device budget, allocations take pinned host chunks mapped into the same range, so
// one allocation may be part device, part host, and its pointer never changes. Device chunks go
// first come, first served (and first within an allocation); past both tiers the answer is
// OUT_OF_MEMORY until a free makes room. Tests that check exact host figures stop the reserve thread
// (Pool::stop_background): it pins and premaps host chunks on its own schedule; placement does not
// depend on it.
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "pool/host_tier.h"
#include "spill_test.h"

namespace pooltest {
namespace {

using Spill = SpillTest;

TEST_F(Spill, AnAllocationLargerThanTheDeviceLimitIsPartDevicePartHost) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);  // 31
  const std::size_t bytes = 100 * kMiB + 12345;       // 51 chunks, the last one partly used
  const std::size_t host = (bytes + gran - 1) / gran - dev;
  CUdeviceptr p = must_allocate(*pool, bytes);
  ASSERT_NE(p, 0u);
  EXPECT_EQ(tiers(p, bytes, gran), layout(dev, host)) << "device chunks first, then host ones";
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunks_held, dev) << "device chunks (host ones are counted apart)";
  EXPECT_EQ(s.host_chunks_mapped, host);
  EXPECT_EQ(s.live_host_bytes, bytes - dev * gran) << "the bytes asked for that lie past the device chunks";
  EXPECT_EQ(s.live_bytes, bytes);
  EXPECT_EQ(s.spilled_allocations, 1u);
  EXPECT_GE(s.host_chunks_held, host);
  EXPECT_EQ(s.host_chunks_held, s.host_chunks_reserve + s.host_chunks_mapped);
  EXPECT_GE(s.peak_host_held_bytes, host * gran);
  EXPECT_EQ(s.host_limit, 128 * kMiB);
  // The data crosses the device/host boundary intact, both ways.
  fill(p, bytes, 7);
  EXPECT_TRUE(holds(p, bytes, 7));
  EXPECT_TRUE(holds_sampled(p, bytes, 7, gran));
  must_free(*pool, p);
  s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  pool->release_idle();
  s = pool->stats(0);
  EXPECT_EQ(s.chunks_held, 0u);
  EXPECT_EQ(s.host_chunks_mapped, 0u);
  EXPECT_EQ(driver_free(), free_at_start);
  pool.reset();
  EXPECT_TRUE(host_memory_whole()) << "the pool was destroyed with host chunks still pinned";
}

// What tiering moves (one move per run): the runs of a range that lie in one tier, clipped to the
// range, ending where no allocation owns the memory.
TEST_F(Spill, RunsInTierSplitAMixedAllocationAtItsTierBoundary) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);
  const std::size_t bytes = 100 * kMiB;
  CUdeviceptr p = must_allocate(*pool, bytes);
  ASSERT_NE(p, 0u);
  ASSERT_EQ(tiers(p, bytes, gran), layout(dev, bytes / gran - dev));
  using Runs = std::vector<std::pair<CUdeviceptr, std::size_t>>;
  const CUdeviceptr boundary = p + dev * gran;
  EXPECT_EQ(pool->runs_in_tier(p, p + bytes, uvmpool::pool::Tier::Device), (Runs{{p, dev * gran}}));
  EXPECT_EQ(pool->runs_in_tier(p, p + bytes, uvmpool::pool::Tier::Host), (Runs{{boundary, bytes - dev * gran}}));
  // Clipped to the range asked, even inside a granule.
  EXPECT_EQ(pool->runs_in_tier(boundary - 1000, boundary + 3000, uvmpool::pool::Tier::Device), (Runs{{boundary - 1000, 1000}}));
  EXPECT_EQ(pool->runs_in_tier(boundary - 1000, boundary + 3000, uvmpool::pool::Tier::Host), (Runs{{boundary, 3000}}));
  // Past the allocation's end nothing is owned: the walk stops there.
  EXPECT_EQ(pool->runs_in_tier(boundary, p + bytes + 8 * gran, uvmpool::pool::Tier::Host), (Runs{{boundary, bytes - dev * gran}}));
  must_free(*pool, p);
  pool->release_idle();  // the freed mapping was cached: its granules had an owner still
  EXPECT_TRUE(pool->runs_in_tier(p, p + bytes, uvmpool::pool::Tier::Host).empty()) << "freed and unmapped: no run";
}

TEST_F(Spill, SmallAllocationsPastTheLimitGetAHostSlab) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  EXPECT_EQ(tiers(full, room(64 * kMiB), gran), layout(device_chunks(64 * kMiB), 0));
  CUdeviceptr small = must_allocate(*pool, 1000);
  ASSERT_NE(small, 0u);
  EXPECT_EQ(tier_at(small), 'H');
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.host_chunks_mapped, 1u) << "one slab";
  EXPECT_EQ(s.live_host_bytes, 1000u);
  EXPECT_EQ(s.spilled_allocations, 1u);
  fill(small, 1000, 3);
  EXPECT_TRUE(holds(small, 1000, 3));
  must_free(*pool, small);
  must_free(*pool, full);
}

TEST_F(Spill, ManyMixedSizesPastTheLimitAreDisjointAndKeepTheirBytes) {
  auto pool = make_pool(spill_config(64 * kMiB, 256 * kMiB));
  const std::size_t sizes[] = {300, 5000, 100000, 700 * kKiB, 2 * kMiB + 1, 3 * kMiB, 5 * kMiB + 7,
                               kMiB, 64, 9 * kMiB - 3, 256 * kKiB + 1, 4 * kMiB};
  std::vector<Block> live;
  std::uint64_t seed = 1;
  std::size_t total_bytes = 0;
  for (int round = 0; total_bytes < 200 * kMiB; ++round) {
    for (std::size_t bytes : sizes) {
      CUdeviceptr p = must_allocate(*pool, bytes);
      ASSERT_NE(p, 0u) << "after " << (total_bytes >> 20) << " MiB";
      fill(p, bytes, seed);
      live.push_back({p, bytes, seed++});
      total_bytes += bytes;
    }
  }
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  expect_consistent(*pool, live, "after filling");
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunks_held, device_chunks(64 * kMiB)) << "the device is full before any host chunk is used";
  EXPECT_GT(s.spilled_allocations, 0u);
  EXPECT_GE(s.live_host_bytes, total_bytes - room(64 * kMiB)) << "what the device cannot hold lies in host chunks";
  EXPECT_GE(s.host_chunks_mapped * gran, s.live_host_bytes);
  // Free every other one and allocate again: host and device chunks get reused, contents intact.
  std::vector<Block> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0) must_free(*pool, live[i].p); else kept.push_back(live[i]);
  }
  live.swap(kept);
  for (std::size_t bytes : sizes) {
    CUdeviceptr p = must_allocate(*pool, bytes * 3);
    ASSERT_NE(p, 0u);
    fill(p, bytes * 3, seed);
    live.push_back({p, bytes * 3, seed++});
  }
  EXPECT_TRUE(disjoint(live));
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  expect_consistent(*pool, live, "after refilling");
  for (const Block& b : live) must_free(*pool, b.p);
  s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

TEST_F(Spill, FindDescribesTheWholeMixedAllocationFromEitherTier) {
  auto pool = make_pool(spill_config(64 * kMiB));
  const std::size_t bytes = 80 * kMiB + 5;
  CUdeviceptr p = must_allocate(*pool, bytes);
  ASSERT_NE(p, 0u);
  const std::size_t boundary = room(64 * kMiB);  // first byte of the first host chunk
  ASSERT_EQ(tier_at(p + boundary - 1), 'D');
  ASSERT_EQ(tier_at(p + boundary), 'H');
  for (std::size_t offset : {std::size_t{0}, boundary - 1, boundary, boundary + 12345, bytes - 1}) {
    auto info = pool->find(p + offset);
    ASSERT_TRUE(info.has_value()) << "offset " << offset;
    EXPECT_EQ(info->base, p) << "offset " << offset;
    EXPECT_EQ(info->size, bytes) << "offset " << offset;
    EXPECT_EQ(info->device, 0);
    EXPECT_EQ(info->context, ctx);
  }
  EXPECT_FALSE(pool->find(p + bytes + gran).has_value());
  must_free(*pool, p);
  EXPECT_FALSE(pool->find(p + boundary).has_value()) << "freed";
}

TEST_F(Spill, DeviceChunksGoFirstAndCachedHostMappingsOnlyWhenTheDeviceIsFull) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);  // 31
  CUdeviceptr a = must_allocate(*pool, dev * gran);
  EXPECT_EQ(tiers(a, dev * gran, gran), layout(dev, 0));
  // The device is full: the next allocation is wholly host.
  CUdeviceptr b = must_allocate(*pool, 16 * kMiB);
  EXPECT_EQ(tiers(b, 16 * kMiB, gran), layout(0, 8));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 16 * kMiB);
  EXPECT_EQ(pool->stats(0).spilled_allocations, 1u);
  // Both freed: a cached device mapping of 31 chunks, a cached host one of 8.
  must_free(*pool, b);
  must_free(*pool, a);
  // Same chunk count as the cached host mapping, but the device has room: device chunks.
  CUdeviceptr c = must_allocate(*pool, 16 * kMiB);
  EXPECT_EQ(tiers(c, 16 * kMiB, gran), layout(8, 0)) << "the cached host mapping was preferred to free device memory";
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u);
  EXPECT_EQ(pool->stats(0).spilled_allocations, 1u);
  // Fill the rest of the device; now a cached host mapping of the right count is the best there is,
  // and it is reused as it is (no driver call builds a mapping).
  CUdeviceptr d = must_allocate(*pool, (dev - 8) * gran);
  EXPECT_EQ(tiers(d, (dev - 8) * gran, gran), layout(dev - 8, 0));
  const std::uint64_t hits = pool->stats(0).cache_hits;
  const unsigned long long maps = sim().call_count("cuMemMap") + sim().call_count("cuMemSetAccess");
  CUdeviceptr e = must_allocate(*pool, 16 * kMiB);
  EXPECT_EQ(e, b) << "the cached host mapping";
  EXPECT_EQ(sim().call_count("cuMemMap") + sim().call_count("cuMemSetAccess"), maps);
  EXPECT_EQ(pool->stats(0).cache_hits, hits + 1);
  EXPECT_EQ(tiers(e, 16 * kMiB, gran), layout(0, 8));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 16 * kMiB);
  for (CUdeviceptr p : {c, d, e}) must_free(*pool, p);
}

// Freed mappings in host memory of one size come back lowest address first, not first freed first:
// a program whose frees reach the pool then gets each step the addresses it had the step before,
// which tiering learns the step by (mapping_cache.h; docs/tiering.md, "Frees that reach the pool").
TEST_F(Spill, FreedHostMappingsOfASizeComeBackLowestAddressFirst) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);
  CUdeviceptr full = must_allocate(*pool, dev * gran);
  std::vector<CUdeviceptr> host;
  for (int i = 0; i < 3; ++i) host.push_back(must_allocate(*pool, 16 * kMiB));
  for (CUdeviceptr p : host) ASSERT_EQ(tiers(p, 16 * kMiB, gran), layout(0, 8));
  std::sort(host.begin(), host.end());
  // Freed highest first: the first freed is the highest.
  for (auto it = host.rbegin(); it != host.rend(); ++it) must_free(*pool, *it);
  for (CUdeviceptr want : host) {
    const CUdeviceptr p = must_allocate(*pool, 16 * kMiB);
    EXPECT_EQ(p, want) << "not the lowest freed host mapping of the size";
  }
  for (CUdeviceptr p : host) must_free(*pool, p);
  must_free(*pool, full);
}

// A freed mixed allocation holds device chunks: the next allocation that fits in them gets them,
// not the host chunks behind them.
TEST_F(Spill, DeviceChunksOfAFreedMixedAllocationServeTheNextOne) {
  auto pool = make_pool(spill_config(64 * kMiB));
  const std::size_t dev = device_chunks(64 * kMiB);
  CUdeviceptr m = must_allocate(*pool, 100 * kMiB);
  ASSERT_EQ(tiers(m, 100 * kMiB, gran), layout(dev, 50 - dev));
  // The reserve thread premaps host runs after that spill: ready host memory must not be taken
  // while the device chunks of the freed allocation sit idle.
  EXPECT_TRUE(eventually([&] { return pool->stats(0).host_chunks_premapped != 0; }))
      << "no host run was premapped: this test needs one";
  must_free(*pool, m);
  CUdeviceptr p = must_allocate(*pool, 20 * kMiB);
  EXPECT_EQ(tiers(p, 20 * kMiB, gran), layout(10, 0));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u);
  fill(p, 20 * kMiB, 9);
  EXPECT_TRUE(holds(p, 20 * kMiB, 9));
  // And the whole again: the device chunks left (21) first, then host.
  CUdeviceptr q = must_allocate(*pool, 60 * kMiB);
  EXPECT_EQ(tiers(q, 60 * kMiB, gran), layout(dev - 10, 30 - (dev - 10)));
  EXPECT_EQ(pool->stats(0).live_host_bytes, (30 - (dev - 10)) * gran);
  EXPECT_TRUE(holds(p, 20 * kMiB, 9));
  must_free(*pool, p);
  must_free(*pool, q);
}

// Device 31 chunks + host 32 chunks = 63: in 8 MiB allocations, 15 fit (60 chunks), then three of
// one chunk, then nothing; a free makes room again.
TEST_F(Spill, PastBothTiersIsOutOfMemoryAndAFreeMakesRoom) {
  auto pool = make_pool(spill_config(64 * kMiB, 64 * kMiB));
  const std::size_t all = device_chunks(64 * kMiB) + 32;
  std::vector<Block> live;
  CUresult r = CUDA_SUCCESS;
  for (CUdeviceptr p = 0; (r = pool->allocate(&p, 8 * kMiB)) == CUDA_SUCCESS;) {
    fill(p, 8 * kMiB, live.size() + 1);
    live.push_back({p, 8 * kMiB, live.size() + 1});
  }
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r);
  EXPECT_EQ(live.size(), all / 4);
  for (std::size_t i = 0; i < all % 4; ++i) live.push_back({must_allocate(*pool, gran), gran, 0});
  const std::uint64_t oom = pool->stats(0).out_of_memory;
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, gran));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 1));
  EXPECT_EQ(pool->stats(0).out_of_memory, oom + 2);
  EXPECT_EQ(pool->stats(0).host_chunks_held, 32u);
  for (std::size_t i = 0; i < all / 4; ++i) EXPECT_TRUE(holds(live[i].p, live[i].bytes, live[i].seed));
  // A free of a host-backed allocation (the last 8 MiB one) makes room for the same request.
  must_free(*pool, live[all / 4 - 1].p);
  EXPECT_CU(pool->allocate(&p, 8 * kMiB));
  live[all / 4 - 1].p = p;
  for (const Block& b : live) must_free(*pool, b.p);
  // Everything free: one allocation of both tiers whole.
  p = must_allocate(*pool, all * gran);
  EXPECT_EQ(tiers(p, all * gran, gran), layout(device_chunks(64 * kMiB), 32));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 1));
  must_free(*pool, p);
}

TEST_F(Spill, OneRequestLargerThanBothTiersIsOutOfMemoryAndChangesNothing) {
  auto pool = make_pool(spill_config(64 * kMiB, 64 * kMiB));
  pool->stop_background();  // it would premap host runs once the device chunks are made
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, room(64 * kMiB) + 64 * kMiB + 1));
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.out_of_memory, 1u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.host_chunks_mapped, 0u);
  EXPECT_EQ(s.spilled_allocations, 0u);
  p = must_allocate(*pool, room(64 * kMiB) + 64 * kMiB);
  must_free(*pool, p);
}

TEST_F(Spill, SpillOffIsOutOfMemoryAtTheDeviceLimit) {
  PoolConfig c = spill_config(64 * kMiB);
  c.spill = false;
  auto pool = make_pool(c);
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, room(64 * kMiB) + 1));
  CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, 1));
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&p, gran));
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.out_of_memory, 3u);
  EXPECT_EQ(s.host_chunks_held, 0u);
  EXPECT_EQ(s.spilled_allocations, 0u);
  EXPECT_TRUE(host_memory_whole()) << "spill is off: nothing may be pinned";
  must_free(*pool, full);
}

// The statistics per tier: what lies where, as the driver's own handles say, and the peaks of each.
TEST_F(Spill, TierFiguresMatchWhereTheChunksLie) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t bytes = 100 * kMiB;
  CUdeviceptr p = must_allocate(*pool, bytes);
  const std::string where = tiers(p, bytes, gran);
  const std::size_t on_device = static_cast<std::size_t>(std::count(where.begin(), where.end(), 'D')) * gran;
  ASSERT_GT(on_device, 0u);
  ASSERT_LT(on_device, bytes);
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, bytes - on_device);
  EXPECT_EQ(s.peak_live_host_bytes, bytes - on_device);
  EXPECT_EQ(s.peak_live_device_bytes, on_device);
  EXPECT_EQ(s.peak_live_bytes, bytes);
  EXPECT_EQ(s.spilled_allocations, 1u);
  EXPECT_EQ(s.host_held_bytes, s.host_chunks_held * gran);
  EXPECT_GE(s.host_held_bytes, bytes - on_device);
  must_free(*pool, p);
  s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_EQ(s.peak_live_host_bytes, bytes - on_device) << "peaks stay";
}

}  // namespace
}  // namespace pooltest

namespace pooltest {
namespace {

// Issue 17: UVMPOOL_HOST_LIMIT=18446744073709551615 wrapped budget + limit, so an allocation that
// fits was refused; the limit is clamped to the machine's memory.
TEST_F(Spill, AHostLimitOfTwoToThe64BytesDoesNotWrapTheBudget) {
  auto pool = make_pool(spill_config(64 * kMiB, std::numeric_limits<std::size_t>::max()));
  const CUdeviceptr p = must_allocate(*pool, 96 * kMiB);  // past the device limit: spills
  EXPECT_NE(p, 0u);
  const std::uint64_t physical =
      static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGE_SIZE));
  EXPECT_LE(pool->stats(0).host_limit, physical) << "clamped to the memory the machine has";
  CUdeviceptr q = 0;
  EXPECT_EQ(pool->allocate(&q, std::size_t{1} << 62), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pool->allocate(&q, std::numeric_limits<std::size_t>::max()), CUDA_ERROR_OUT_OF_MEMORY);
  if (p != 0) must_free(*pool, p);
}

// charge() compared now + bytes with the limit: a huge request wrapped past it and was counted.
TEST(HostTierCharge, AChargeThatWouldWrapIsRefusedAndNotCounted) {
  uvmpool::pool::HostTier tier(drv(), 100, std::chrono::milliseconds(5000));
  EXPECT_TRUE(tier.charge(60));
  EXPECT_FALSE(tier.charge(std::numeric_limits<std::uint64_t>::max() - 10));
  EXPECT_FALSE(tier.charge(41));
  EXPECT_TRUE(tier.charge(40));
  EXPECT_EQ(tier.charged(), 100u);
  tier.uncharge(100);
}

// Repeated placement (src/pool/repeat_places.h) takes a cached mapping at a stream-ordered
// allocation's place in whatever tier it lies, but one with host pieces only where the device cannot
// hold the request: device memory first, as placement has it.
TEST_F(Spill, AStreamOrderedAllocationTakesItsSpilledPlaceOnlyWhenTheDeviceHasNoRoom) {
  auto pool = make_pool(spill_config(64 * kMiB));
  pool->stop_background();
  const std::size_t dev = device_chunks(64 * kMiB);
  const auto alloc_async = [&](std::size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_CU(pool->allocate_async(&p, bytes, nullptr));
    return p;
  };
  const CUdeviceptr x = alloc_async((dev - 2) * gran);
  const CUdeviceptr y = alloc_async(4 * gran);  // two chunks on the device, two in host memory
  ASSERT_EQ(pool->stats(0).live_host_bytes, 2 * gran);
  must_free(*pool, y);
  must_free(*pool, x);  // the device has room again
  const CUdeviceptr z = alloc_async(4 * gran);  // y's place is remembered for it
  EXPECT_NE(z, y);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u) << "served from the device, not y's spilled mapping";
  must_free(*pool, z);
  // With the device full, the spilled place is taken back.
  const CUdeviceptr x2 = alloc_async((dev - 2) * gran);
  const CUdeviceptr y2 = alloc_async(4 * gran);
  const CUdeviceptr fill = alloc_async(2 * gran);
  must_free(*pool, y2);
  const CUdeviceptr z2 = alloc_async(4 * gran);
  EXPECT_EQ(z2, y2);
  for (CUdeviceptr p : {x2, z2, fill}) must_free(*pool, p);
}

}  // namespace
}  // namespace pooltest
