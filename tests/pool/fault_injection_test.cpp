// Driver failures in the middle of the pool's multi-step paths (growth, slab creation, stitching).
// For each driver function a path uses, the 1st, 2nd, ... call of it fails, until the operation
// completes without reaching the armed failure. Each time:
//   - the operation fails with the injected error or OUT_OF_MEMORY (or recovers: then its memory
//     must be good);
//   - the pool is intact: the stats add up, live allocations keep their bytes, a retry succeeds;
//   - nothing leaks: once everything is freed and release_idle has run, the pool holds no chunk and
//     the simulator's free memory is back to where it started (a leaked handle or mapping keeps
//     device memory).
#include <functional>

#include "pool_test.h"

namespace pooltest {
namespace {

struct Scenario {
  const char* name;
  std::size_t limit;                 // 0: the whole device
  std::size_t (*setup)(Pool&, std::vector<Block>&, std::size_t gran);  // returns the bytes to ask for
  bool async;                        // the operation is allocate_async on a created stream
  std::vector<const char*> must_reach;  // functions the operation must call (else the scenario is wrong)
};

CUdeviceptr setup_alloc(Pool& pool, std::vector<Block>& live, std::size_t bytes) {
  CUdeviceptr p = 0;
  EXPECT_CU(pool.allocate(&p, bytes)) << " (set-up)";
  if (p == 0) return 0;
  fill(p, bytes, live.size() + 1);
  live.push_back({p, bytes, live.size() + 1});
  return p;
}

void free_block(Pool& pool, const Block& b) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_EQ(pool.deallocate(b.p, &r), Ownership::Ours);
  EXPECT_CU(r);
}

// Fills the budget with single chunks, then frees every other one: scattered free chunks only.
std::size_t scatter(Pool& pool, std::vector<Block>& live, std::size_t gran) {
  std::vector<Block> all;
  for (CUdeviceptr p = 0; pool.allocate(&p, gran) == CUDA_SUCCESS;) {
    fill(p, gran, all.size() + 1);
    all.push_back({p, gran, all.size() + 1});
  }
  std::size_t freed = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i % 2 == 0) {
      free_block(pool, all[i]);
      ++freed;
    } else {
      live.push_back(all[i]);
    }
  }
  return freed * gran - 1000;
}

const Scenario kScenarios[] = {
    {"GrowthOfAFreshPool", 0, [](Pool&, std::vector<Block>&, std::size_t g) { return 3 * g + 4097; }, false,
     {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"}},
    {"GrowthOfAWarmPool", 0,
     [](Pool& pool, std::vector<Block>& live, std::size_t g) {
       setup_alloc(pool, live, 2 * g + 1);
       setup_alloc(pool, live, 300);
       return 5 * g - 3;
     },
     false, {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}},
    {"AsyncGrowthOnAStream", 0, [](Pool&, std::vector<Block>&, std::size_t g) { return 2 * g + 5; }, true,
     {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}},
    {"SlabOfAFreshPool", 0, [](Pool&, std::vector<Block>&, std::size_t) -> std::size_t { return 256; }, false,
     {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"}},
    {"SlabOfAWarmPool", 0,
     [](Pool& pool, std::vector<Block>& live, std::size_t g) -> std::size_t {
       setup_alloc(pool, live, 256);
       setup_alloc(pool, live, g + 1);
       return 100000;  // another size class: a new slab
     },
     false, {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}},
    {"StitchingUnderAFullBudget", 32 * kMiB, scatter, false, {"cuMemMap", "cuMemSetAccess"}},
    // Two extents (PoolConfig's 32 MiB) and a tail of chunks: the extents' cuMemCreate and cuMemMap fail too.
    {"ExtentsAndChunksOfAFreshPool", 0, [](Pool&, std::vector<Block>&, std::size_t g) { return 64 * kMiB + 3 * g - 100; },
     false, {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"}},
    // The budget's only free memory is an extent while chunks are wanted: it is given back and made
    // again as chunks (a failure there leaves the pool an extent smaller, never a leak).
    {"ChunksOfAFreeExtentUnderAFullBudget", 64 * kMiB,
     [](Pool& pool, std::vector<Block>& live, std::size_t g) -> std::size_t {
       CUdeviceptr extent = 0;
       EXPECT_CU(pool.allocate(&extent, 32 * kMiB)) << " (set-up)";
       for (CUdeviceptr p = 0; pool.allocate(&p, g) == CUDA_SUCCESS;) {  // the rest of the budget, live
         fill(p, g, live.size() + 1);
         live.push_back({p, g, live.size() + 1});
       }
       free_block(pool, {extent, 32 * kMiB, 0});
       return 3 * g;
     },
     false, {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}},
    {"SlabFromACachedMappingUnderAFullBudget", 32 * kMiB,
     [](Pool& pool, std::vector<Block>& live, std::size_t g) -> std::size_t {
       std::vector<Block> all;
       for (CUdeviceptr p = 0; pool.allocate(&p, 2 * g) == CUDA_SUCCESS;) all.push_back({p, 2 * g, 0});
       for (const Block& b : all) free_block(pool, b);  // all cached, none free, no room to grow
       return 512;
     },
     false, {"cuMemMap", "cuMemSetAccess"}},
};

struct Case {
  const Scenario* scenario;
  const char* function;
  CUresult error;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.scenario->name << "/" << c.function; }

class FaultInjection : public PoolTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    free_at_start = driver_free();
  }
  void TearDown() override {
    sim().clear_failures();
    if (stream != nullptr) drv().cuStreamDestroy_v2(stream);
    PoolTest::TearDown();
  }

  CUresult run(Pool& pool, std::size_t bytes, CUdeviceptr* p) {
    return GetParam().scenario->async ? pool.allocate_async(p, bytes, stream) : pool.allocate(p, bytes);
  }

  void expect_consistent(Pool& pool, const std::vector<Block>& live, const std::string& when) {
    const DeviceStats s = pool.stats(0);
    std::size_t sum = 0;
    for (const Block& b : live) {
      sum += b.bytes;
      EXPECT_TRUE(holds(b.p, b.bytes, b.seed)) << when;
    }
    EXPECT_EQ(s.live_allocations, live.size()) << when;
    EXPECT_EQ(s.live_bytes, sum) << when;
    EXPECT_LE(s.chunks_free + s.chunks_cached, s.chunks_held) << when;
    EXPECT_EQ(pool.check_invariants(), "") << when;
    EXPECT_EQ(free_at_start - driver_free(), s.chunks_held * s.chunk_size)
        << when << ": the driver has lent more than the pool holds (a leaked handle or mapping)";
  }

  CUstream stream = nullptr;
};

TEST_P(FaultInjection, FailureAtEveryCallLeavesThePoolIntactAndLeaksNothing) {
  const Case& c = GetParam();
  const Scenario& sc = *c.scenario;
  const PoolConfig config = sc.limit ? limited_config(sc.limit) : test_config();
  int hits = 0, recovered = 0;
  for (unsigned n = 1; n <= 200 && !HasFailure(); ++n) {
    const std::string when = std::string(c.function) + " failing at its call " + std::to_string(n);
    SCOPED_TRACE(when);
    {
      auto pool = make_pool(config);
      std::vector<Block> live;
      const std::size_t bytes = sc.setup(*pool, live, gran);
      ASSERT_FALSE(HasFailure()) << "set-up failed";
      const DeviceStats before = pool->stats(0);
      const unsigned long long calls = sim().call_count(c.function);
      ASSERT_EQ(sim().fail(c.function, n, c.error), 0);
      CUdeviceptr p = 0;
      const CUresult r = run(*pool, bytes, &p);
      const bool hit = sim().call_count(c.function) - calls >= n;
      sim().clear_failures();
      if (!hit) {
        ASSERT_CU(r) << " (no failure was reached)";
        fill(p, bytes, 4242);
        EXPECT_TRUE(holds(p, bytes, 4242));
        live.push_back({p, bytes, 4242});
        expect_consistent(*pool, live, when);
        for (const Block& b : live) free_block(*pool, b);
        pool.reset();
        EXPECT_EQ(driver_free(), free_at_start) << "after the pool was destroyed";
        break;
      }
      ++hits;
      if (r == CUDA_SUCCESS) {  // the pool recovered: the memory must be good
        ++recovered;
        fill(p, bytes, 4242);
        EXPECT_TRUE(holds(p, bytes, 4242)) << "recovered allocation";
        live.push_back({p, bytes, 4242});
      } else {
        EXPECT_TRUE(r == c.error || r == CUDA_ERROR_OUT_OF_MEMORY)
            << "answered " << cu_name(r) << ", injected " << cu_name(c.error);
        EXPECT_FALSE(pool->find(p).has_value() && p != 0) << "a failed allocation left a live allocation";
        EXPECT_EQ(pool->stats(0).live_allocations, before.live_allocations);
      }
      expect_consistent(*pool, live, when + ", after the failure");
      // A retry succeeds and its memory is good.
      CUdeviceptr q = 0;
      ASSERT_CU(run(*pool, bytes, &q)) << " (retry after " << when << ")";
      fill(q, bytes, 777);
      EXPECT_TRUE(holds(q, bytes, 777));
      live.push_back({q, bytes, 777});
      expect_consistent(*pool, live, when + ", after the retry");
      for (const Block& b : live) free_block(*pool, b);
      if (sc.async) drv().cuStreamSynchronize(stream);
      pool->release_idle();
      EXPECT_EQ(pool->stats(0).chunks_held, 0u) << "after freeing everything and release_idle";
      EXPECT_EQ(driver_free(), free_at_start) << "after freeing everything and release_idle: memory leaked";
    }
    EXPECT_EQ(driver_free(), free_at_start) << "after the pool was destroyed";
  }
  RecordProperty("failures_reached", hits);
  RecordProperty("recovered", recovered);
  bool must = false;
  for (const char* f : sc.must_reach) must = must || std::string(f) == c.function;
  if (must) {
    EXPECT_GE(hits, 1) << sc.name << " never called " << c.function << ": the scenario does not test it";
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const Scenario& s : kScenarios)
    for (const char* f : {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"})
      for (CUresult e : {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN}) cases.push_back({&s, f, e});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Pool, FaultInjection, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  const Case& c = info.param;
  return std::string(c.scenario->name) + "_" + c.function + "_" +
         (c.error == CUDA_ERROR_OUT_OF_MEMORY ? "OutOfMemory" : "Unknown");
});

// cuMemUnmap when a mapping is taken apart (release_idle here). There is nothing to roll back to, so
// the pool asks once more; a range still mapped after that must never be handed out again (a new
// mapping there would fail, or alias the old chunks).
class UnmapFailure : public PoolTest {
 protected:
  // An allocation of `bytes` (0: two chunks, a mapping of its own; a small size lands in a slab), freed
  // and taken apart with cuMemUnmap failing at the calls listed; then the same size again, filled and
  // checked. Returns the two addresses.
  std::pair<CUdeviceptr, CUdeviceptr> free_and_allocate_again(std::initializer_list<unsigned> failing,
                                                              std::size_t bytes = 0) {
    auto pool = make_pool();
    if (bytes == 0) bytes = 2 * gran;
    const CUdeviceptr first = must_allocate(*pool, bytes);
    must_free(*pool, first);
    const unsigned long long calls = sim().call_count("cuMemUnmap");
    for (unsigned n : failing) EXPECT_EQ(sim().fail("cuMemUnmap", n, CUDA_ERROR_UNKNOWN), 0);
    pool->release_idle();
    EXPECT_GE(sim().call_count("cuMemUnmap") - calls, 2u) << "the failed unmap was not asked again";
    sim().clear_failures();
    const CUdeviceptr again = must_allocate(*pool, bytes);
    fill(again, bytes, 99);
    EXPECT_TRUE(holds(again, bytes, 99));
    EXPECT_EQ(pool->check_invariants(), "");
    must_free(*pool, again);
    return {first, again};
  }
};

TEST_F(UnmapFailure, APassingFailureIsAskedAgainAndTheRangeIsReused) {
  const auto [first, again] = free_and_allocate_again({1});
  EXPECT_EQ(again, first) << "the range was unmapped on the second try, so it is free again";
}

TEST_F(UnmapFailure, ARangeStillMappedIsNeverHandedOutAgain) {
  const auto [first, again] = free_and_allocate_again({1, 2});
  EXPECT_NE(again, first) << "the range is still mapped: a mapping there again would fail or alias";
}

TEST_F(UnmapFailure, ASlabStillMappedIsNeverHandedOutAgain) {
  const auto [first, again] = free_and_allocate_again({1, 2}, 4096);
  EXPECT_NE(again, first) << "the slab's range is still mapped";
}

TEST_F(UnmapFailure, ASlabUnmappedOnTheSecondTryIsReused) {
  const auto [first, again] = free_and_allocate_again({1}, 4096);
  EXPECT_EQ(again, first);
}

}  // namespace
}  // namespace pooltest
