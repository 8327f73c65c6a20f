// Fragmentation that only stitching can overcome: the budget is (nearly) full, the free memory is
// scattered in single chunks between live allocations, and one large request asks for all of it. No
// contiguous free range exists, and the driver has no more to give; a pool that maps free chunks
// into one new contiguous range succeeds.
#include "pool_test.h"

namespace pooltest {
namespace {

struct Layout {
  const char* name;
  std::size_t limit;  // 0: the whole device
  // Allocation i of the fill (in chunks), and whether it is freed afterwards.
  std::size_t (*chunks)(std::size_t i);
  bool (*freed)(std::size_t i);
};
void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }

class Stitching : public PoolTest, public ::testing::WithParamInterface<Layout> {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(total, 256 * kMiB) << "run under UVMPOOL_SIM_DEVICE_MEMORY=256M (as CTest does)";
  }
};

TEST_P(Stitching, OneLargeRequestForAllTheScatteredFreeMemorySucceeds) {
  const Layout& layout = GetParam();
  auto pool = make_pool(layout.limit ? limited_config(layout.limit) : test_config());
  std::vector<Block> live;
  std::size_t freed_chunks = 0;
  // Fill the budget.
  for (std::size_t i = 0;; ++i) {
    const std::size_t bytes = layout.chunks(i) * gran;
    CUdeviceptr p = 0;
    CUresult r = pool->allocate(&p, bytes);
    if (r != CUDA_SUCCESS) {
      ASSERT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r);
      break;
    }
    fill(p, bytes, i);
    live.push_back({p, bytes, i});
  }
  ASSERT_GE(live.size(), 8u);
  // Free the chosen ones: the free memory is scattered between live allocations.
  std::vector<Block> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (layout.freed(i)) {
      must_free(*pool, live[i].p);
      freed_chunks += live[i].bytes / gran;
    } else {
      kept.push_back(live[i]);
    }
  }
  const DeviceStats before = pool->stats(0);
  std::size_t largest_freed = 0;
  for (std::size_t i = 0; i < live.size(); ++i)
    if (layout.freed(i)) largest_freed = std::max(largest_freed, live[i].bytes);
  // All of it (less a little, so the size is no multiple of the chunk).
  const std::size_t want = freed_chunks * gran - 1000;
  ASSERT_GT(want, largest_freed) << "the layout leaves a free range large enough: nothing to stitch";
  CUdeviceptr big = 0;
  ASSERT_CU(pool->allocate(&big, want)) << " (" << freed_chunks << " scattered free chunks, "
                                        << before.chunks_cached << " cached, " << before.chunks_free << " free)";
  fill(big, want, 999);
  EXPECT_TRUE(holds(big, want, 999));
  for (const Block& b : kept) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  kept.push_back({big, want, 999});
  EXPECT_TRUE(disjoint(kept));
  const DeviceStats after = pool->stats(0);
  EXPECT_GE(after.mappings_broken - before.mappings_broken, 2u);
  EXPECT_GT(after.stitched_maps, before.stitched_maps);
  EXPECT_EQ(after.chunks_held, before.chunks_held) << "the pool grew: the budget had room, nothing was tested";
  // And freeing it all, the budget can be filled again.
  for (const Block& b : kept) must_free(*pool, b.p);
  std::vector<CUdeviceptr> again;
  for (std::size_t i = 0; i < before.chunks_held; ++i) again.push_back(must_allocate(*pool, gran));
  for (CUdeviceptr p : again) must_free(*pool, p);
}

std::size_t one_chunk(std::size_t) { return 1; }
std::size_t one_to_three_chunks(std::size_t i) { return 1 + i % 3; }
bool every_other(std::size_t i) { return i % 2 == 0; }
bool two_of_three(std::size_t i) { return i % 3 != 1; }

INSTANTIATE_TEST_SUITE_P(
    Pool, Stitching,
    ::testing::Values(Layout{"EveryOtherChunkUnder64MiBLimit", 64 * kMiB, one_chunk, every_other},
                      Layout{"EveryOtherChunkOfTheWholeDevice", 0, one_chunk, every_other},
                      Layout{"TwoOfThreeMixedSizesUnder96MiBLimit", 96 * kMiB, one_to_three_chunks, two_of_three},
                      Layout{"EveryOtherMixedSizeOfTheWholeDevice", 0, one_to_three_chunks, every_other}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pooltest
