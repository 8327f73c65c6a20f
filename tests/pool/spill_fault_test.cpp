// Driver failures on the spill paths: pinning host chunks (cuMemCreate of host memory) and building
// a mapping that holds both tiers (cuMemAddressReserve, cuMemMap, cuMemSetAccess per run of one
// tier). For each, the 1st, 2nd, ... call fails until the operation no longer reaches the failure:
//   - the answer is OUT_OF_MEMORY or the injected error (or success: then the memory must be good);
//   - nothing leaks: the host limit is set to exactly what the request needs, so a host chunk lost
//     on the failed attempt makes the retry fail; once the pool is destroyed the simulator's device
//     and host memory are back where they started.
// The background reserve thread is stopped (Pool::stop_background) so that only the path under test
// pins: its pinning would consume armed failures and move the call counts.
#include "spill_test.h"

namespace pooltest {
namespace {

class SpillFault : public SpillTest, public ::testing::WithParamInterface<CUresult> {
 protected:
  void TearDown() override {
    sim().clear_failures();
    SpillTest::TearDown();
  }
  // After the pool is gone: every chunk, device or host, was released.
  void expect_nothing_held(const std::string& when) {
    EXPECT_EQ(driver_free(), free_at_start) << when << ": device memory leaked";
    EXPECT_TRUE(host_memory_whole()) << when;
  }
};

// The device is full, the reserve is empty: the allocation pins its 6 chunks inline, and the failure
// lands among them. The host limit is exactly those 6 chunks, so a retry proves none was lost.
TEST_P(SpillFault, PinningFailureIsOutOfMemoryAndLeaksNothing) {
  const CUresult error = GetParam();
  int hits = 0;
  for (unsigned n = 1; n <= 20 && !HasFailure(); ++n) {
    const std::string when = "host cuMemCreate failing at its call " + std::to_string(n);
    SCOPED_TRACE(when);
    {
      auto pool = make_pool(spill_config(64 * kMiB, 12 * kMiB, 0));
      pool->stop_background();
      CUdeviceptr full = must_allocate(*pool, room(64 * kMiB));
      fill(full, room(64 * kMiB), 1);
      const unsigned long long calls = sim().call_count("cuMemCreate");
      ASSERT_EQ(sim().fail("cuMemCreate", n, error), 0);
      CUdeviceptr p = 0;
      const CUresult r = pool->allocate(&p, 12 * kMiB);
      const bool hit = sim().call_count("cuMemCreate") - calls >= n;
      sim().clear_failures();
      if (hit) {
        ++hits;
        EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, r) << " (a program asked for device memory: pinning is our business)";
        const DeviceStats s = pool->stats(0);
        EXPECT_EQ(s.live_allocations, 1u);
        EXPECT_EQ(s.host_chunks_held, 0u) << "chunks pinned before the failure were kept or lost";
        EXPECT_EQ(s.host_chunks_mapped, 0u);
        EXPECT_EQ(s.spilled_allocations, 0u);
        EXPECT_TRUE(host_memory_whole()) << "a host chunk was pinned and not released";
        // The pool is usable: the same request now succeeds, within the same host limit.
        ASSERT_CU(pool->allocate(&p, 12 * kMiB)) << " (retry)";
      } else {
        ASSERT_CU(r) << " (no failure was reached)";
      }
      EXPECT_EQ(tiers(p, 12 * kMiB, gran), layout(0, 6));
      EXPECT_EQ(pool->check_invariants(), "") << "with the spilled allocation live";
      fill(p, 12 * kMiB, 2);
      EXPECT_TRUE(holds(p, 12 * kMiB, 2));
      EXPECT_TRUE(holds(full, room(64 * kMiB), 1));
      must_free(*pool, p);
      must_free(*pool, full);
      pool->release_idle();
      EXPECT_EQ(driver_free(), free_at_start) << "after release_idle";
      if (!hit) {
        pool.reset();
        expect_nothing_held("after the pool was destroyed");
        break;
      }
    }
    expect_nothing_held("after the pool was destroyed");
  }
  EXPECT_EQ(hits, 6) << "one host cuMemCreate per chunk";
}

TEST_P(SpillFault, AFailedReserveFillPinsNothing) {
  auto pool = make_pool(spill_config(64 * kMiB, 128 * kMiB, 0));
  pool->stop_background();
  ASSERT_EQ(sim().fail("cuMemCreate", 3, GetParam()), 0);
  EXPECT_NE(pool->fill_host_reserve(0, 8 * kMiB), CUDA_SUCCESS);
  sim().clear_failures();
  EXPECT_EQ(pool->stats(0).host_chunks_held, 0u);
  EXPECT_TRUE(host_memory_whole());
  EXPECT_CU(pool->fill_host_reserve(0, 8 * kMiB));
  EXPECT_EQ(pool->stats(0).host_chunks_reserve, 4u);
}

INSTANTIATE_TEST_SUITE_P(Pool, SpillFault, ::testing::Values(CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN),
                         [](const auto& info) {
                           return info.param == CUDA_ERROR_OUT_OF_MEMORY ? "OutOfMemory" : "Unknown";
                         });

// Building a mixed mapping fails part way: every chunk goes back where it came from (device chunks to
// the pool, host chunks to the reserve). `keep` bytes are live beforehand (a warm pool).
struct MapCase {
  const char* function;
  CUresult error;
  std::size_t keep;
};
void PrintTo(const MapCase& c, std::ostream* os) { *os << c.function << "/" << c.keep; }

class SpillMapFault : public SpillTest, public ::testing::WithParamInterface<MapCase> {
 protected:
  void TearDown() override {
    sim().clear_failures();
    SpillTest::TearDown();
  }
};

// A small budget (16 MiB: 7 device chunks) keeps each round short: every call is failed in turn.
TEST_P(SpillMapFault, AFailedMixedMappingRollsBackBothTiers) {
  const MapCase& c = GetParam();
  constexpr std::size_t kLimit = 16 * kMiB;
  constexpr std::size_t kHost = 5;  // host chunks of the request; the host limit allows no more
  const std::size_t bytes = room(kLimit) - c.keep + kHost * gran;
  int hits = 0;
  for (unsigned n = 1; n <= 40 && !HasFailure(); ++n) {
    const std::string when = std::string(c.function) + " failing at its call " + std::to_string(n);
    SCOPED_TRACE(when);
    {
      auto pool = make_pool(spill_config(kLimit, kHost * gran, 0));
      pool->stop_background();
      CUdeviceptr keep = c.keep ? must_allocate(*pool, c.keep) : 0;
      if (keep != 0) fill(keep, c.keep, 3);
      const unsigned long long calls = sim().call_count(c.function);
      ASSERT_EQ(sim().fail(c.function, n, c.error), 0);
      CUdeviceptr p = 0;
      const CUresult r = pool->allocate(&p, bytes);
      const bool hit = sim().call_count(c.function) - calls >= n;
      sim().clear_failures();
      if (hit) {
        ++hits;
        if (r != CUDA_SUCCESS) {
          EXPECT_TRUE(r == c.error || r == CUDA_ERROR_OUT_OF_MEMORY) << "answered " << cu_name(r);
          EXPECT_FALSE(pool->find(p).has_value() && p != 0);
          const DeviceStats s = pool->stats(0);
          EXPECT_EQ(s.live_allocations, keep ? 1u : 0u);
          EXPECT_EQ(s.host_chunks_mapped, 0u) << "host chunks left mapped by the failed attempt";
          EXPECT_EQ(s.live_host_bytes, 0u);
          EXPECT_LE(s.host_chunks_held, kHost);
          EXPECT_EQ(s.host_chunks_held, s.host_chunks_reserve) << "host chunks neither mapped nor in the reserve";
          ASSERT_CU(pool->allocate(&p, bytes)) << " (retry: a host chunk was lost)";
        }
      } else {
        ASSERT_CU(r) << " (no failure was reached)";
      }
      EXPECT_EQ(tiers(p, bytes, gran), layout(device_chunks(kLimit) - c.keep / gran, kHost));
      fill(p, bytes, 4);
      EXPECT_TRUE(holds(p, bytes, 4));
      if (keep != 0) {
        EXPECT_TRUE(holds(keep, c.keep, 3));
      }
      must_free(*pool, p);
      if (keep != 0) must_free(*pool, keep);
      pool->release_idle();
      EXPECT_EQ(driver_free(), free_at_start) << "after release_idle";
      if (!hit) {
        pool.reset();
        EXPECT_TRUE(host_memory_whole());
        break;
      }
    }
    EXPECT_TRUE(host_memory_whole()) << "after the pool was destroyed";
  }
  EXPECT_GE(hits, 1) << c.function << " was never reached";
}

std::vector<MapCase> map_cases() {
  std::vector<MapCase> cases;
  for (const char* f : {"cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"})
    for (CUresult e : {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN})
      for (std::size_t keep : {std::size_t{0}, 4 * kMiB})
        // A warm pool maps into address space it reserved already.
        if (keep == 0 || std::string(f) != "cuMemAddressReserve") cases.push_back({f, e, keep});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Pool, SpillMapFault, ::testing::ValuesIn(map_cases()), [](const auto& info) {
  const MapCase& c = info.param;
  return std::string(c.function) + "_" + (c.error == CUDA_ERROR_OUT_OF_MEMORY ? "OutOfMemory" : "Unknown") +
         (c.keep ? "_WarmPool" : "_FreshPool");
});

}  // namespace
}  // namespace pooltest
