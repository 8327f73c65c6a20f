// What the pool saves: steady patterns make no driver call, small allocations share chunks, idle
// memory goes back to the driver on request.
#include "pool_test.h"

namespace pooltest {
namespace {

using Reuse = PoolTest;

struct Counts {
  unsigned long long create, map, access, reserve, unmap, release;
  static Counts now() {
    const Sim& s = sim();
    return {s.call_count("cuMemCreate"), s.call_count("cuMemMap"),          s.call_count("cuMemSetAccess"),
            s.call_count("cuMemAddressReserve"), s.call_count("cuMemUnmap"), s.call_count("cuMemRelease")};
  }
};

void expect_no_vmm_calls_between(const Counts& a, const Counts& b) {
  EXPECT_EQ(b.create - a.create, 0u) << "cuMemCreate calls";
  EXPECT_EQ(b.map - a.map, 0u) << "cuMemMap calls";
  EXPECT_EQ(b.access - a.access, 0u) << "cuMemSetAccess calls";
  EXPECT_EQ(b.reserve - a.reserve, 0u) << "cuMemAddressReserve calls";
  EXPECT_EQ(b.unmap - a.unmap, 0u) << "cuMemUnmap calls";
  EXPECT_EQ(b.release - a.release, 0u) << "cuMemRelease calls";
}

TEST_F(Reuse, SteadyAllocFreeOfOneLargeSizeMakesNoDriverCall) {
  for (std::size_t bytes : {gran, 3 * gran + 4097, 16 * gran}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    must_free(*pool, must_allocate(*pool, bytes));  // warm-up builds the mapping
    const DeviceStats before = pool->stats(0);
    const Counts a = Counts::now();
    CUdeviceptr first = 0;
    for (int i = 0; i < 100; ++i) {
      CUdeviceptr p = must_allocate(*pool, bytes);
      if (i == 0) first = p;
      EXPECT_EQ(p, first) << "iteration " << i;
      must_free(*pool, p);
    }
    expect_no_vmm_calls_between(a, Counts::now());
    const DeviceStats after = pool->stats(0);
    EXPECT_EQ(after.cache_hits - before.cache_hits, 100u);
    EXPECT_EQ(after.stitched_maps, before.stitched_maps);
    EXPECT_EQ(after.chunks_created, before.chunks_created);
  }
}

TEST_F(Reuse, SteadyAsyncAllocFreeOnAStreamMakesNoVmmCall) {
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::size_t bytes : {std::size_t{300}, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = 0;
    ASSERT_CU(pool->allocate_async(&p, bytes, s));
    CUresult r = CUDA_ERROR_UNKNOWN;
    ASSERT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
    const Counts a = Counts::now();
    for (int i = 0; i < 100; ++i) {
      ASSERT_CU(pool->allocate_async(&p, bytes, s));
      ASSERT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
      ASSERT_CU(r);
    }
    expect_no_vmm_calls_between(a, Counts::now());
  }
  EXPECT_CU(drv().cuStreamDestroy_v2(s));
}

TEST_F(Reuse, SteadySmallAllocFreeMakesNoDriverCall) {
  auto pool = make_pool();
  must_free(*pool, must_allocate(*pool, 777));
  const Counts a = Counts::now();
  for (int i = 0; i < 1000; ++i) must_free(*pool, must_allocate(*pool, 777));
  expect_no_vmm_calls_between(a, Counts::now());
}

TEST_F(Reuse, AThousandSmallAllocationsShareAFewChunks) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < 1000; ++i) live.push_back(must_allocate(*pool, 256));
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 1000u);
  EXPECT_EQ(s.live_bytes, 256000u);
  // 256,000 bytes fit in one 2 MiB chunk; allow one more for a partly used slab.
  EXPECT_LE(s.chunks_held, 2u) << "1000 x 256 B took " << s.chunks_held << " chunks";
  for (CUdeviceptr p : live) must_free(*pool, p);
}

TEST_F(Reuse, SmallAllocationsOfMixedSizesUseFarFewerChunksThanAllocations) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> live;
  std::size_t bytes_asked = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t bytes = 1 + (i * 7919) % 8192;
    bytes_asked += bytes;
    live.push_back(must_allocate(*pool, bytes));
  }
  const DeviceStats s = pool->stats(0);
  const std::size_t needed = (bytes_asked + gran - 1) / gran;
  // Rounding to slot sizes may double what is asked for, plus a partly used slab per size class.
  EXPECT_LE(s.chunks_held, 2 * needed + 16) << bytes_asked << " bytes asked for";
  for (CUdeviceptr p : live) must_free(*pool, p);
}

TEST_F(Reuse, ReleaseIdleGivesEveryIdleChunkBackToTheDriver) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < 8; ++i) live.push_back(must_allocate(*pool, 3 * gran + 1));
  for (int i = 0; i < 100; ++i) live.push_back(must_allocate(*pool, 1000));
  const std::size_t held = pool->stats(0).chunks_held * pool->stats(0).chunk_size;
  EXPECT_GE(held, 32 * gran);
  EXPECT_EQ(free_at_start - driver_free(), held) << "the driver's figure and the pool's disagree";
  for (CUdeviceptr p : live) must_free(*pool, p);
  EXPECT_EQ(free_at_start - driver_free(), held) << "freed memory stays cached until release_idle";
  pool->release_idle();
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunks_held, 0u);
  EXPECT_EQ(s.chunks_free, 0u);
  EXPECT_EQ(s.chunks_cached, 0u);
  EXPECT_EQ(s.chunks_released, s.chunks_created);
  EXPECT_EQ(driver_free(), free_at_start);
  // And the pool works on afterwards.
  CUdeviceptr p = must_allocate(*pool, 2 * gran);
  fill(p, 2 * gran, 1);
  EXPECT_TRUE(holds(p, 2 * gran, 1));
  must_free(*pool, p);
}

TEST_F(Reuse, ReleaseIdleKeepingChunksTakesMappingsApartButKeepsTheMemory) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < 4; ++i) live.push_back(must_allocate(*pool, 3 * gran));
  live.push_back(must_allocate(*pool, 500));
  CUdeviceptr keep = must_allocate(*pool, 2 * gran);
  fill(keep, 2 * gran, 11);
  for (CUdeviceptr p : live) must_free(*pool, p);
  const DeviceStats before = pool->stats(0);
  const std::size_t driver_before = driver_free();
  pool->release_idle(/*keep_chunks=*/true);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunks_cached, 0u);
  EXPECT_EQ(s.chunks_held, before.chunks_held) << "chunks were given back";
  EXPECT_GE(s.chunks_free, 13u) << "four 3-chunk mappings and a slab taken apart";
  EXPECT_EQ(driver_free(), driver_before);
  EXPECT_TRUE(holds(keep, 2 * gran, 11));
  // The kept chunks serve a new size without cuMemCreate.
  const unsigned long long creates = sim().call_count("cuMemCreate");
  CUdeviceptr p = must_allocate(*pool, 12 * gran);
  EXPECT_EQ(sim().call_count("cuMemCreate"), creates);
  fill(p, 12 * gran, 12);
  EXPECT_TRUE(holds(p, 12 * gran, 12));
  must_free(*pool, p);
  must_free(*pool, keep);
  pool->release_idle();
  EXPECT_EQ(driver_free(), free_at_start);
}

TEST_F(Reuse, ReleaseIdleKeepsLiveAllocationsIntact) {
  auto pool = make_pool();
  std::vector<Block> live;
  for (int i = 0; i < 40; ++i) {
    const std::size_t bytes = i % 3 == 0 ? 2 * gran + 5 : 100 + i * 50;
    CUdeviceptr p = must_allocate(*pool, bytes);
    fill(p, bytes, i);
    live.push_back({p, bytes, static_cast<std::uint64_t>(i)});
  }
  std::vector<Block> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2) {
      must_free(*pool, live[i].p);
    } else {
      kept.push_back(live[i]);
    }
  }
  pool->release_idle();
  for (const Block& b : kept) {
    EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
    ASSERT_TRUE(pool->find(b.p).has_value());
  }
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunks_cached, 0u);
  EXPECT_EQ(s.chunks_free, 0u);
  EXPECT_EQ(free_at_start - driver_free(), s.chunks_held * s.chunk_size);
  for (const Block& b : kept) must_free(*pool, b.p);
}

TEST_F(Reuse, DestroyingThePoolGivesEverythingBack) {
  {
    auto pool = make_pool();
    for (int i = 0; i < 4; ++i) must_free(*pool, must_allocate(*pool, 5 * gran));
    must_free(*pool, must_allocate(*pool, 100));
    EXPECT_LT(driver_free(), free_at_start);
  }
  EXPECT_EQ(driver_free(), free_at_start);
}

TEST_F(Reuse, StatsCountLiveBytesAsAskedAndPeaks) {
  auto pool = make_pool();
  CUdeviceptr a = must_allocate(*pool, 1234);
  CUdeviceptr b = must_allocate(*pool, gran + 1);
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.chunk_size, gran);
  EXPECT_EQ(s.live_bytes, 1234 + gran + 1);
  EXPECT_EQ(s.live_allocations, 2u);
  EXPECT_GE(s.chunks_held, 3u);  // two for the large one, one slab
  EXPECT_LE(s.chunks_free + s.chunks_cached, s.chunks_held);
  EXPECT_EQ(s.peak_live_bytes, s.live_bytes);
  EXPECT_EQ(s.peak_held_bytes, s.chunks_held * s.chunk_size);
  EXPECT_EQ(s.budget, total);
  must_free(*pool, b);
  s = pool->stats(0);
  EXPECT_EQ(s.live_bytes, 1234u);
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.peak_live_bytes, 1234 + gran + 1);
  EXPECT_GE(s.chunks_cached, 2u);
  must_free(*pool, a);
}

}  // namespace
}  // namespace pooltest
