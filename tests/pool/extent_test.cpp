// Extents (UVMPOOL_EXTENT_SIZE, PoolConfig::extent_size): large allocations are built from physical
// handles of several chunks, each mapped by one cuMemMap, so a mapping costs one call per extent
// instead of one per chunk; chunks serve the rest (the tail of a request, slabs, what scattered free
// memory leaves). An extent is mapped and unmapped only whole.
#include "pool_test.h"

namespace pooltest {
namespace {

constexpr std::size_t kExtent = 32 * kMiB;  // PoolConfig's default

class Extents : public PoolTest {
 protected:
  std::size_t per_extent() const { return kExtent / gran; }
};

TEST_F(Extents, AColdLargeAllocationIsOneHandleAndOneMappingPerExtent) {
  auto pool = make_pool();
  sim().reset_counts();
  const std::size_t bytes = 512 * kMiB;
  const CUdeviceptr p = must_allocate(*pool, bytes);
  EXPECT_EQ(sim().call_count("cuMemCreate"), bytes / kExtent);
  EXPECT_EQ(sim().call_count("cuMemMap"), bytes / kExtent);
  EXPECT_EQ(sim().call_count("cuMemSetAccess"), 1u);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.extent_size, kExtent);
  EXPECT_EQ(s.extents_held, bytes / kExtent);
  EXPECT_EQ(s.chunks_held * s.chunk_size, bytes) << "extents are counted in chunks";
  fill(p, bytes, 11);
  EXPECT_TRUE(holds(p, bytes, 11));
  must_free(*pool, p);
  sim().reset_counts();
  pool->release_idle();
  EXPECT_EQ(sim().call_count("cuMemUnmap"), bytes / kExtent) << "one unmap per extent";
  EXPECT_EQ(sim().call_count("cuMemRelease"), bytes / kExtent);
  EXPECT_EQ(pool->stats(0).extents_held, 0u);
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
}

TEST_F(Extents, WhatWholeExtentsDoNotCoverIsChunks) {
  auto pool = make_pool();
  sim().reset_counts();
  const std::size_t bytes = 2 * kExtent + 5 * gran - 100;  // two extents and five chunks
  const CUdeviceptr p = must_allocate(*pool, bytes);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 2u + 5u);
  EXPECT_EQ(sim().call_count("cuMemMap"), 2u + 5u);
  EXPECT_EQ(pool->stats(0).extents_held, 2u);
  const auto view = pool->chunks_of(p + 1000);
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->chunks.size(), 7u);
  ASSERT_EQ(view->granules.size(), 7u);
  std::size_t granules = 0;
  for (std::uint32_t g : view->granules) granules += g;
  EXPECT_EQ(granules * view->chunk_size, 2 * kExtent + 5 * gran) << "the pieces cover the mapping";
  EXPECT_EQ(view->granules.front(), per_extent());
  EXPECT_EQ(view->granules.back(), 1u);
  fill(p, bytes, 12);
  EXPECT_TRUE(holds(p, bytes, 12));
  must_free(*pool, p);
}

TEST_F(Extents, OffMeansChunksOnly) {
  PoolConfig config = test_config();
  config.extent_size = 0;
  auto pool = make_pool(config);
  sim().reset_counts();
  const CUdeviceptr p = must_allocate(*pool, 2 * kExtent);
  EXPECT_EQ(sim().call_count("cuMemCreate"), 2 * kExtent / gran);
  EXPECT_EQ(pool->stats(0).extent_size, 0u);
  EXPECT_EQ(pool->stats(0).extents_held, 0u);
  must_free(*pool, p);
}

TEST_F(Extents, ACachedMappingIsNeverCutInsideAnExtent) {
  auto pool = make_pool();
  const CUdeviceptr whole = must_allocate(*pool, 2 * kExtent);
  must_free(*pool, whole);
  // Half an extent: no cut of the cached mapping leaves it whole pieces, so it is not carved; the
  // cached mapping gives up one whole extent instead, and the request is served by chunks.
  const DeviceStats before = pool->stats(0);
  const CUdeviceptr half = must_allocate(*pool, kExtent / 2);
  const DeviceStats after = pool->stats(0);
  EXPECT_EQ(after.mappings_carved, before.mappings_carved);
  fill(half, kExtent / 2, 13);
  EXPECT_TRUE(holds(half, kExtent / 2, 13));
  // One extent's request is served by a cut between the two extents of what stays cached.
  const CUdeviceptr one = must_allocate(*pool, kExtent);
  fill(one, kExtent, 14);
  EXPECT_TRUE(holds(one, kExtent, 14));
  EXPECT_TRUE(holds(half, kExtent / 2, 13));
  must_free(*pool, half);
  must_free(*pool, one);
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, 0u);
}

TEST_F(Extents, ACutInsideAnExtentMovesToItsEndWhenThatAddsLittle) {
  auto pool = make_pool();
  const CUdeviceptr whole = must_allocate(*pool, 2 * kExtent);
  must_free(*pool, whole);
  const DeviceStats before = pool->stats(0);
  sim().reset_counts();
  // One chunk short of an extent: the cut moves to the extent's end (a chunk more, within an
  // eighth), and the other extent stays cached at its address.
  const std::size_t bytes = kExtent - gran;
  const CUdeviceptr p = must_allocate(*pool, bytes);
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(p, whole);
  EXPECT_EQ(pool->stats(0).mappings_carved, before.mappings_carved + 1);
  const auto view = pool->chunks_of(p);
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->granules.size(), 1u);
  EXPECT_EQ(view->granules[0], per_extent());
  const CUdeviceptr q = must_allocate(*pool, kExtent);
  EXPECT_EQ(q, whole + kExtent) << "the other extent, still cached";
  EXPECT_EQ(vmm_build_calls(), 0u);
  fill(p, bytes, 17);
  fill(q, kExtent, 18);
  EXPECT_TRUE(holds(p, bytes, 17));
  EXPECT_TRUE(holds(q, kExtent, 18));
  EXPECT_EQ(pool->check_invariants(), "") << "with a rounded cut live";
  must_free(*pool, p);
  must_free(*pool, q);
  EXPECT_EQ(pool->check_invariants(), "") << "after the frees";
}

TEST_F(Extents, AMappingARoundedCutMadeIsReusedOnItsStreamForTheSameSize) {
  // Freed with cuMemFreeAsync while its stream's work is held back, the rounded mapping (an extent
  // for a request a chunk short of it) stays pending on that stream; the next allocation of the same
  // size there takes it back, with no driver call, though its chunk count is not the request's.
  REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
  auto pool = make_pool();
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  hold_stream(stream, true);
  const CUdeviceptr whole = must_allocate(*pool, 2 * kExtent);
  must_free(*pool, whole);
  const std::size_t bytes = kExtent - gran;
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, bytes, stream));
  EXPECT_EQ(p, whole);
  CUresult r = CUDA_ERROR_UNKNOWN;
  ASSERT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
  ASSERT_CU(r);
  sim().reset_counts();
  CUdeviceptr q = 0;
  ASSERT_CU(pool->allocate_async(&q, bytes, stream));
  EXPECT_EQ(q, p) << "the pending mapping was not reused on its stream";
  EXPECT_EQ(vmm_build_calls(), 0u);
  ASSERT_EQ(pool->deallocate_async(q, stream, &r), Ownership::Ours);
  ASSERT_CU(r);
  hold_stream(stream, false);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  pool.reset();
  drv().cuStreamDestroy_v2(stream);
}

TEST_F(Extents, ChunksAreMadeOfAFreeExtentWhenTheBudgetHasNoRoomForMore) {
  // An extent, then the rest of the budget in single chunks, then the extent freed: a request for
  // chunks finds only that extent free and no room to grow, so the extent is given back and made
  // again as chunks.
  auto pool = make_pool(limited_config(2 * kExtent));
  const CUdeviceptr p = must_allocate(*pool, kExtent);
  ASSERT_EQ(pool->stats(0).extents_held, 1u);
  std::vector<CUdeviceptr> filler;
  for (CUdeviceptr f = 0; pool->allocate(&f, gran) == CUDA_SUCCESS;) filler.push_back(f);
  ASSERT_FALSE(filler.empty());
  must_free(*pool, p);
  sim().reset_counts();
  const CUdeviceptr q = must_allocate(*pool, 3 * gran);
  EXPECT_EQ(sim().call_count("cuMemRelease"), 1u) << "the extent given back";
  EXPECT_EQ(sim().call_count("cuMemCreate"), per_extent()) << "made again as chunks";
  EXPECT_EQ(pool->stats(0).extents_held, 0u);
  fill(q, 3 * gran, 15);
  EXPECT_TRUE(holds(q, 3 * gran, 15));
  // The rest of the extent's memory still serves, as chunks stitched.
  const CUdeviceptr r = must_allocate(*pool, (per_extent() - 3) * gran);
  fill(r, (per_extent() - 3) * gran, 16);
  EXPECT_TRUE(holds(r, (per_extent() - 3) * gran, 16));
  EXPECT_TRUE(holds(q, 3 * gran, 15));
  CUdeviceptr none = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&none, gran + 1));
  EXPECT_EQ(pool->check_invariants(), "") << "after an extent was made again as chunks";
  must_free(*pool, q);
  must_free(*pool, r);
  for (CUdeviceptr f : filler) must_free(*pool, f);
}

TEST_F(Extents, AnUnevenSizeIsRoundedDownToAPowerOfTwoAndTooSmallIsOff) {
  PoolConfig config = test_config();
  config.extent_size = 48 * kMiB;  // only through a hand-made PoolConfig: the option refuses it
  auto pool = make_pool(config);
  const CUdeviceptr p = must_allocate(*pool, 64 * kMiB);
  EXPECT_EQ(pool->stats(0).extent_size, 32 * kMiB);
  must_free(*pool, p);
  config.extent_size = gran;  // one chunk: no extents
  pool.reset();
  pool = make_pool(config);
  const CUdeviceptr q = must_allocate(*pool, 64 * kMiB);
  EXPECT_EQ(pool->stats(0).extent_size, 0u);
  EXPECT_EQ(pool->stats(0).extents_held, 0u);
  must_free(*pool, q);
}

}  // namespace
}  // namespace pooltest
