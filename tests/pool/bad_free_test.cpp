// Frees the pool must refuse (double free, interior pointers) and pointers it must leave alone
// (foreign ones, from the driver's own cuMemAlloc).
#include <cstring>

#include "pool_test.h"

namespace pooltest {
namespace {

using BadFree = PoolTest;

::testing::AssertionResult same_stats(const DeviceStats& a, const DeviceStats& b) {
  if (std::memcmp(&a, &b, sizeof(DeviceStats)) == 0) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure() << "stats changed:";
#define FIELD(x) \
  if (a.x != b.x) f << " " #x " " << a.x << " -> " << b.x;
  FIELD(chunk_size) FIELD(chunks_held) FIELD(chunks_free) FIELD(chunks_cached) FIELD(live_bytes)
  FIELD(live_allocations) FIELD(peak_held_bytes) FIELD(peak_live_bytes) FIELD(stitched_maps) FIELD(cache_hits)
  FIELD(mappings_broken) FIELD(mappings_carved) FIELD(chunks_created) FIELD(chunks_released) FIELD(budget) FIELD(out_of_memory)
#undef FIELD
  return f;
}

// The sizes a bad free is tried on: a slab slot and a stitched mapping.
std::vector<std::size_t> bad_free_sizes(std::size_t gran) { return {256, 4000, gran, 2 * gran + 100}; }

TEST_F(BadFree, DoubleFreeIsInvalidValueAndLeavesThePoolIntact) {
  for (std::size_t bytes : bad_free_sizes(gran)) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr keep = must_allocate(*pool, bytes);
    fill(keep, bytes, 1);
    CUdeviceptr p = must_allocate(*pool, bytes);
    must_free(*pool, p);
    const DeviceStats before = pool->stats(0);
    CUresult r = CUDA_SUCCESS;
    EXPECT_EQ(pool->deallocate(p, &r), Ownership::Ours) << "the pool's own (freed) address";
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r);
    EXPECT_TRUE(same_stats(before, pool->stats(0)));
    EXPECT_TRUE(holds(keep, bytes, 1));
    // Freed once only: two new allocations of the size do not get the same memory.
    CUdeviceptr a = must_allocate(*pool, bytes);
    CUdeviceptr b = must_allocate(*pool, bytes);
    EXPECT_TRUE(disjoint({{a, bytes}, {b, bytes}, {keep, bytes}}));
    fill(a, bytes, 2);
    fill(b, bytes, 3);
    EXPECT_TRUE(holds(a, bytes, 2));
    EXPECT_TRUE(holds(keep, bytes, 1));
    for (CUdeviceptr x : {a, b, keep}) must_free(*pool, x);
    EXPECT_EQ(pool->stats(0).live_allocations, 0u);
    EXPECT_EQ(pool->stats(0).live_bytes, 0u);
  }
}

TEST_F(BadFree, AsyncDoubleFreeIsInvalidValueAndLeavesThePoolIntact) {
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::size_t bytes : bad_free_sizes(gran)) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = 0;
    ASSERT_CU(pool->allocate_async(&p, bytes, s));
    CUresult r = CUDA_ERROR_UNKNOWN;
    ASSERT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
    ASSERT_CU(r);
    const DeviceStats before = pool->stats(0);
    r = CUDA_SUCCESS;
    EXPECT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r);
    EXPECT_TRUE(same_stats(before, pool->stats(0)));
    CUdeviceptr a = 0, b = 0;
    ASSERT_CU(pool->allocate_async(&a, bytes, s));
    ASSERT_CU(pool->allocate_async(&b, bytes, s));
    EXPECT_TRUE(disjoint({{a, bytes}, {b, bytes}}));
    for (CUdeviceptr x : {a, b}) must_free(*pool, x);
  }
  EXPECT_CU(drv().cuStreamDestroy_v2(s));
}

TEST_F(BadFree, InteriorPointerIsInvalidValueAndTheAllocationStaysLive) {
  for (std::size_t bytes : bad_free_sizes(gran)) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = must_allocate(*pool, bytes);
    fill(p, bytes, 9);
    const DeviceStats before = pool->stats(0);
    for (std::size_t offset : {std::size_t{1}, std::size_t{256}, bytes - 1}) {
      CUresult r = CUDA_SUCCESS;
      EXPECT_EQ(pool->deallocate(p + offset, &r), Ownership::Ours) << "offset " << offset;
      EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << " (offset " << offset << ")";
    }
    EXPECT_TRUE(same_stats(before, pool->stats(0)));
    ASSERT_TRUE(pool->find(p).has_value());
    EXPECT_EQ(pool->find(p)->size, bytes);
    EXPECT_TRUE(holds(p, bytes, 9));
    // Not freed: a new allocation does not land on it.
    CUdeviceptr q = must_allocate(*pool, bytes);
    EXPECT_TRUE(disjoint({{p, bytes}, {q, bytes}}));
    must_free(*pool, q);
    must_free(*pool, p);
  }
}

TEST_F(BadFree, ForeignPointerIsReportedForeignAndUntouched) {
  auto pool = make_pool();
  CUdeviceptr mine = must_allocate(*pool, 1000);
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::size_t bytes : {std::size_t{1000}, 3 * gran}) {
    CUdeviceptr native = 0;
    ASSERT_CU(drv().cuMemAlloc_v2(&native, bytes));
    fill(native, bytes, 5);
    const DeviceStats before = pool->stats(0);
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool->deallocate(native, &r), Ownership::Foreign);
    EXPECT_EQ(pool->deallocate_async(native, s, &r), Ownership::Foreign);
    EXPECT_EQ(pool->deallocate(native + 16, &r), Ownership::Foreign);
    EXPECT_FALSE(pool->find(native).has_value());
    EXPECT_TRUE(same_stats(before, pool->stats(0)));
    EXPECT_TRUE(holds(native, bytes, 5)) << "the pool touched a foreign allocation";
    // Still the driver's: it frees it.
    EXPECT_CU(drv().cuMemFree_v2(native));
  }
  must_free(*pool, mine);
  EXPECT_CU(drv().cuStreamDestroy_v2(s));
}

}  // namespace
}  // namespace pooltest
