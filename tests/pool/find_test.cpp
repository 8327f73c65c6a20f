// Pool::find: what cuMemGetAddressRange and cuPointerGetAttribute answer for the pool's pointers.
#include <set>

#include "pool_test.h"

namespace pooltest {
namespace {

using Find = PoolTest;

TEST_F(Find, AnswersBaseAndSizeAsAskedForSmallAndLargeAllocations) {
  auto pool = make_pool();
  for (std::size_t bytes : {std::size_t{1}, std::size_t{256}, std::size_t{1000}, kMiB, kMiB + 1, gran,
                            3 * gran + 17}) {
    CUdeviceptr p = must_allocate(*pool, bytes);
    ASSERT_NE(p, 0u);
    for (std::size_t offset : {std::size_t{0}, bytes / 3, bytes - 1}) {
      auto info = pool->find(p + offset);
      ASSERT_TRUE(info.has_value()) << "offset " << offset << " of " << bytes;
      EXPECT_EQ(info->base, p);
      EXPECT_EQ(info->size, bytes) << "the size asked for, not the rounded one";
    }
    must_free(*pool, p);
  }
}

// As the simulator's cuMemGetAddressRange answers for cuMemAlloc memory (NOT_FOUND from the size
// asked for on); pool.h: "the live allocation containing p".
TEST_F(Find, DoesNotAnswerPastTheSizeAskedFor) {
  auto pool = make_pool();
  CUdeviceptr small = must_allocate(*pool, 100);
  CUdeviceptr large = must_allocate(*pool, gran + 100);
  // Just past the end of what was asked for (not 256-aligned, so no other allocation starts there).
  EXPECT_FALSE(pool->find(small + 100).has_value()) << "inside the slot's padding";
  EXPECT_FALSE(pool->find(large + gran + 100).has_value()) << "inside the last chunk's padding";
  must_free(*pool, small);
  must_free(*pool, large);
}

TEST_F(Find, DoesNotAnswerForFreedOrForeignPointers) {
  auto pool = make_pool();
  CUdeviceptr small = must_allocate(*pool, 100);
  CUdeviceptr large = must_allocate(*pool, gran + 100);
  CUdeviceptr native = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&native, 4096));
  EXPECT_FALSE(pool->find(native).has_value());
  EXPECT_FALSE(pool->find(0).has_value());
  must_free(*pool, small);
  must_free(*pool, large);
  EXPECT_FALSE(pool->find(small).has_value()) << "freed small allocation still found";
  EXPECT_FALSE(pool->find(large).has_value()) << "freed large allocation still found";
  EXPECT_FALSE(pool->find(large + gran).has_value());
  EXPECT_CU(drv().cuMemFree_v2(native));
}

TEST_F(Find, InPoolSpaceCoversThePoolsAddressesLiveOrNotAndNothingElse) {
  auto pool = make_pool();
  CUdeviceptr small = must_allocate(*pool, 100);
  CUdeviceptr large = must_allocate(*pool, 2 * gran + 1);
  CUdeviceptr freed = must_allocate(*pool, gran);
  must_free(*pool, freed);
  for (CUdeviceptr p : {small, small + 99, large, large + 2 * gran, freed})
    EXPECT_TRUE(pool->in_pool_space(p)) << "0x" << std::hex << p;
  CUdeviceptr native = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&native, 3 * gran));
  EXPECT_FALSE(pool->in_pool_space(native));
  EXPECT_FALSE(pool->in_pool_space(native + gran));
  EXPECT_FALSE(pool->in_pool_space(0));
  EXPECT_CU(drv().cuMemFree_v2(native));
  must_free(*pool, small);
  must_free(*pool, large);
}

TEST_F(Find, RecordsTheContextAndDeviceCurrentAtAllocation) {
  auto pool = make_pool();
  CUdeviceptr p = must_allocate(*pool, 4096);
  CUdeviceptr q = must_allocate(*pool, 2 * gran);
  for (CUdeviceptr x : {p, q}) {
    auto info = pool->find(x);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->device, 0);
    EXPECT_EQ(info->context, ctx);
  }
  must_free(*pool, p);
  must_free(*pool, q);
}

TEST_F(Find, BufferIdsAreUniqueAndNeverReusedEvenWhenTheAddressIs) {
  auto pool = make_pool();
  std::set<std::uint64_t> ids;
  std::set<CUdeviceptr> addresses;
  int allocations = 0;
  // Same sizes again and again: the cache hands the same addresses back, never the same id.
  for (int round = 0; round < 200; ++round) {
    for (std::size_t bytes : {std::size_t{256}, std::size_t{5000}, 2 * gran + 1}) {
      CUdeviceptr p = must_allocate(*pool, bytes);
      ASSERT_NE(p, 0u);
      auto info = pool->find(p);
      ASSERT_TRUE(info.has_value());
      EXPECT_NE(info->buffer_id, 0u);
      EXPECT_TRUE(ids.insert(info->buffer_id).second)
          << "buffer id " << info->buffer_id << " given twice (round " << round << ", " << bytes << " bytes)";
      addresses.insert(p);
      ++allocations;
      must_free(*pool, p);
    }
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(allocations));
  // Not required, but the point of the test: addresses did repeat.
  EXPECT_LT(addresses.size(), ids.size()) << "no address was ever reused, so id reuse was not really tested";
}

TEST_F(Find, LiveAllocationsHaveDistinctBufferIds) {
  auto pool = make_pool();
  std::vector<CUdeviceptr> live;
  std::set<std::uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p = must_allocate(*pool, i % 2 ? 512 : gran);
    live.push_back(p);
    ASSERT_TRUE(pool->find(p).has_value());
    EXPECT_TRUE(ids.insert(pool->find(p)->buffer_id).second);
  }
  for (CUdeviceptr p : live) must_free(*pool, p);
}

}  // namespace
}  // namespace pooltest
