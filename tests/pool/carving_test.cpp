// Carving in the pool (UVMPOOL_CARVE_MAX, src/pool/carving.cpp): requests up to carve_max, small
// ones included, share extents mapped once. The typed suites (allocators.h) run every allocator behaviour
// with carving on too; these are what carving adds or changes.
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "pool_test.h"

namespace pooltest {
namespace {

class Carving : public PoolTest {
 protected:
  static PoolConfig carving(std::size_t limit = 0, std::size_t carve_max = 256 * kMiB) {
    PoolConfig c = limit != 0 ? limited_config(limit) : test_config();
    c.carve_max = carve_max;
    return c;
  }
  // What a budget leaves the pool once the context's own memory is counted.
  std::size_t room(std::size_t budget) const { return budget - (total - free_at_start); }
};

TEST_F(Carving, AllocationsShareAnExtentMappedOnceAndAreFoundAsTheDriverWouldAnswer) {
  auto pool = make_pool(carving());
  sim().reset_counts();
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 8; ++i) {
    got.push_back(must_allocate(*pool, 3 * kMiB + 1000));
    fill(got.back(), 3 * kMiB + 1000, 10 + i);
  }
  EXPECT_EQ(sim().call_count("cuMemMap"), 1u) << "eight allocations of 3 MiB: one 32 MiB extent, mapped once";
  EXPECT_EQ(sim().call_count("cuMemCreate"), 1u);
  for (int i = 0; i < 8; ++i) {
    const auto info = pool->find(got[i] + 5000);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->base, got[i]);
    EXPECT_EQ(info->size, 3 * kMiB + 1000);
    EXPECT_FALSE(pool->find(got[i] + 3 * kMiB + 1000).has_value()) << "past the allocation, in its rounding";
    EXPECT_TRUE(holds(got[i], 3 * kMiB + 1000, 10 + i));
  }
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 8u);
  EXPECT_EQ(s.live_bytes, 8 * (3 * kMiB + 1000));
  EXPECT_EQ(s.carved_mapped_bytes, 32 * kMiB);
  EXPECT_EQ(s.carved_live_bytes, 8 * (3 * kMiB + 1024)) << "each rounded up to 256 B";
  EXPECT_EQ(s.carved_idle_bytes, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
  sim().reset_counts();
  for (CUdeviceptr p : got) must_free(*pool, p);
  EXPECT_EQ(pool->stats(0).carved_idle_bytes, 32 * kMiB) << "a slot with no allocation is idle memory";
  got.clear();
  // Above a sixteenth of the slot: carved in the large lane, where the freed ones were.
  for (int i = 0; i < 8; ++i) got.push_back(must_allocate(*pool, 2 * kMiB + 4096 + 77 * i));
  EXPECT_EQ(vmm_build_calls() + sim().call_count("cuMemUnmap"), 0u) << "reuse of freed carved memory called the driver";
  for (CUdeviceptr p : got) must_free(*pool, p);
  EXPECT_EQ(pool->check_invariants(), "");
}

// What a move of the slots a range lies in carries, and whose advice they answer to (tiering): the
// live allocations in those slots, in address order, found from any pointer in the slot; a range
// reaching into the next slot takes that slot's too; freed ones not; none for memory not carved.
TEST_F(Carving, TheAllocationsOfASlotAreItsLiveOnesInAddressOrder) {
  auto pool = make_pool(carving(0, 64 * kMiB));
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 12; ++i) got.push_back(must_allocate(*pool, 3 * kMiB));  // 10 fit a 32 MiB slot
  std::sort(got.begin(), got.end());
  const auto slots = pool->carved_slots(got[0], got[0] + 1);
  ASSERT_TRUE(slots.has_value());
  ASSERT_EQ(slots->slot_bytes, 32 * kMiB);
  const CUdeviceptr slot = slots->start;
  std::vector<CUdeviceptr> in_slot;
  for (CUdeviceptr p : got)
    if (p < slot + 32 * kMiB && p + 3 * kMiB > slot) in_slot.push_back(p);
  ASSERT_GE(in_slot.size(), 2u);
  const auto bases = [&](CUdeviceptr from, CUdeviceptr end) {
    std::vector<CUdeviceptr> out;
    for (const AllocationInfo& a : pool->carved_slot_allocations(from, end)) out.push_back(a.base);
    return out;
  };
  EXPECT_EQ(bases(slot + 5, slot + 6), in_slot) << "the slot's allocations, from any pointer in it";
  must_free(*pool, in_slot[1]);
  std::erase(got, in_slot[1]);
  in_slot.erase(in_slot.begin() + 1);
  EXPECT_EQ(bases(in_slot[0], in_slot[0] + 1), in_slot) << "the freed one is gone";
  const std::vector<CUdeviceptr> both = bases(slot, slot + 32 * kMiB + 1);  // into the next slot
  EXPECT_GT(both.size(), in_slot.size());
  EXPECT_TRUE(std::is_sorted(both.begin(), both.end()));
  const CUdeviceptr large = must_allocate(*pool, 100 * kMiB);  // past carve_max: stitched
  EXPECT_TRUE(pool->carved_slot_allocations(large, large + 1).empty());
  must_free(*pool, large);
  for (CUdeviceptr p : got) must_free(*pool, p);
  EXPECT_TRUE(pool->carved_slot_allocations(slot, slot + 1).empty());
}

TEST_F(Carving, InteriorPointersAndDoubleFreesAreRefusedAndChangeNothing) {
  auto pool = make_pool(carving());
  const CUdeviceptr p = must_allocate(*pool, 5 * kMiB);
  CUresult r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate(p + 4096, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "an interior pointer";
  EXPECT_TRUE(pool->find(p).has_value());
  must_free(*pool, p);
  EXPECT_EQ(pool->deallocate(p, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "a double free";
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
}

TEST_F(Carving, MemoryFreedOnAStreamIsReusedOnlyOnceItsWorkIsDone) {
  REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
  auto pool = make_pool(carving(64 * kMiB));
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // Fill the one extent the budget has room for: 30 MiB of its 32.
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(pool->allocate_async(&a, 15 * kMiB, s));
  ASSERT_CU(pool->allocate_async(&b, 15 * kMiB, s));
  hold_stream(s, true);  // its work is not done
  CUresult r = CUDA_SUCCESS;
  ASSERT_EQ(pool->deallocate_async(a, s, &r), Ownership::Ours);
  ASSERT_CU(r);
  EXPECT_FALSE(pool->find(a).has_value()) << "freed: no longer an allocation";
  // Another request would need a's bytes: not while the stream's work may still use them.
  CUdeviceptr c = 0;
  ASSERT_CU(pool->allocate(&c, 15 * kMiB));
  EXPECT_NE(c, a) << "reused while the freeing stream's work may still read it";
  must_free(*pool, c);
  hold_stream(s, false);
  ASSERT_CU(drv().cuStreamSynchronize(s));
  CUdeviceptr d = 0;
  ASSERT_CU(pool->allocate(&d, 15 * kMiB));
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, d);
  ASSERT_EQ(pool->deallocate_async(b, s, &r), Ownership::Ours);
  ASSERT_CU(r);
  ASSERT_CU(drv().cuStreamSynchronize(s));
  pool->release_idle();
  EXPECT_EQ(pool->check_invariants(), "");
  EXPECT_EQ(pool->stats(0).chunks_held, 0u) << "release_idle left carved memory held";
  drv().cuStreamDestroy_v2(s);
}

TEST_F(Carving, SmallRequestsAreCarvedTooAndMapNothingOfTheirOwn) {
  // With carving on, requests at or below the slab limit are carved as well: a slab is a mapping of
  // its own (one cuMemMap and one cuMemSetAccess each), which is what carving saves.
  auto pool = make_pool(carving());
  sim().reset_counts();
  std::vector<std::pair<CUdeviceptr, std::size_t>> got;
  for (int i = 0; i < 600; ++i) {
    const std::size_t bytes = 1 + static_cast<std::size_t>(i) * 97 % (64 * 1024);
    got.emplace_back(must_allocate(*pool, bytes), bytes);
    fill(got.back().first, bytes, i % 200 + 1);
  }
  EXPECT_EQ(sim().call_count("cuMemMap"), 1u) << "600 small allocations in one extent mapped once, no slab";
  for (int i = 0; i < 600; ++i) {
    const auto [p, bytes] = got[static_cast<std::size_t>(i)];
    EXPECT_EQ(p % 256, 0u) << "cudaMalloc's alignment";
    const auto info = pool->find(p);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->size, bytes);
    EXPECT_TRUE(holds(p, bytes, i % 200 + 1));
  }
  EXPECT_EQ(pool->check_invariants(), "");
  for (const auto& [p, bytes] : got) must_free(*pool, p);
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
}

TEST_F(Carving, MemoryFreedOnAStreamIsTakenBackAtOnceOnThatStreamAndByNoOtherBeforeItsWorkIsDone) {
  REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
  auto pool = make_pool(carving());
  CUstream s = nullptr, other = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(drv().cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0;
  ASSERT_CU(pool->allocate_async(&a, 3000, s));
  hold_stream(s, true);  // its work is not done
  CUresult r = CUDA_SUCCESS;
  ASSERT_EQ(pool->deallocate_async(a, s, &r), Ownership::Ours);
  ASSERT_CU(r);
  CUdeviceptr elsewhere = 0;
  ASSERT_CU(pool->allocate_async(&elsewhere, 3000, other));
  EXPECT_NE(elsewhere, a) << "another stream took memory the freeing stream's work may still use";
  CUdeviceptr again = 0;
  ASSERT_CU(pool->allocate_async(&again, 2900, s));
  EXPECT_EQ(again, a) << "the same stream (stream order makes it safe) did not take its own free back";
  const auto info = pool->find(again);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->size, 2900u) << "taken back with the new size";
  EXPECT_EQ(pool->stats(0).live_allocations, 2u);
  EXPECT_EQ(pool->check_invariants(), "");
  hold_stream(s, false);
  ASSERT_CU(drv().cuStreamSynchronize(s));
  must_free(*pool, again);
  must_free(*pool, elsewhere);
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
  drv().cuStreamDestroy_v2(s);
  drv().cuStreamDestroy_v2(other);
}

// Memory freed on a stream whose work is done is reused before the range grows (growth would take
// idle memory apart, or grow the pool).
TEST_F(Carving, MemoryFreedOnAStreamIsReusedBeforeTheRangeGrows) {
  auto pool = make_pool(carving());
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0;
  ASSERT_CU(pool->allocate_async(&a, 30 * kMiB, s));
  CUresult r = CUDA_SUCCESS;
  ASSERT_EQ(pool->deallocate_async(a, s, &r), Ownership::Ours);
  ASSERT_CU(r);
  ASSERT_CU(drv().cuStreamSynchronize(s));
  sim().reset_counts();
  const CUdeviceptr b = must_allocate(*pool, 30 * kMiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(vmm_build_calls(), 0u) << "the range grew while memory freed on a stream was done with";
  must_free(*pool, b);
  EXPECT_EQ(pool->check_invariants(), "");
  drv().cuStreamDestroy_v2(s);
}

TEST_F(Carving, MemoryFreedDuringCaptureIsNeverReused) {
  REQUIRE_SIM_CONTROL(set_capture_status, "uvmpool_sim_set_capture_status");
  auto pool = make_pool(carving());
  CUstream s = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const CUdeviceptr p = must_allocate(*pool, 4 * kMiB);
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUresult r = CUDA_SUCCESS;
  ASSERT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
  ASSERT_CU(r);
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_FALSE(pool->find(p).has_value());
  EXPECT_EQ(pool->deallocate(p, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "freed twice";
  for (int i = 0; i < 16; ++i) {
    const CUdeviceptr q = must_allocate(*pool, 4 * kMiB);
    EXPECT_FALSE(q < p + 4 * kMiB && p < q + 4 * kMiB) << "a graph's address handed out again";
    must_free(*pool, q);
  }
  pool->release_idle();
  EXPECT_EQ(pool->check_invariants(), "");
  drv().cuStreamDestroy_v2(s);
}

TEST_F(Carving, IdleSlotsGiveWayToAStitchedAllocationAtTheBudget) {
  auto pool = make_pool(carving(128 * kMiB, 64 * kMiB));
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 6; ++i) got.push_back(must_allocate(*pool, 16 * kMiB));  // three extents
  for (CUdeviceptr p : got) must_free(*pool, p);
  // Larger than carve_max: its own mapping, from the chunks the idle carved slots give back.
  CUdeviceptr big = 0;
  ASSERT_CU(pool->allocate(&big, room(128 * kMiB))) << "idle carved memory kept from a stitched allocation";
  fill(big, room(128 * kMiB), 5);
  EXPECT_TRUE(holds(big, room(128 * kMiB), 5));
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, big);
}

TEST_F(Carving, ARequestNoExtentCanHoldTakesTheStitchedPath) {
  auto pool = make_pool(carving(64 * kMiB));
  // 62 MiB of room: one 32 MiB extent, then 30 MiB that no extent fits in.
  const CUdeviceptr a = must_allocate(*pool, 30 * kMiB);
  const CUdeviceptr b = must_allocate(*pool, 28 * kMiB);
  fill(a, 30 * kMiB, 1);
  fill(b, 28 * kMiB, 2);
  EXPECT_TRUE(holds(a, 30 * kMiB, 1));
  EXPECT_TRUE(holds(b, 28 * kMiB, 2));
  EXPECT_EQ(pool->stats(0).chunks_held, 30u) << "an extent for a, 14 chunks stitched for b";
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, a);
  must_free(*pool, b);
}

TEST_F(Carving, IpcSeesTheExtentAnAllocationShares) {
  PoolConfig c = carving();
  auto pool = make_pool(c);
  must_allocate(*pool, 3 * kMiB);
  const CUdeviceptr p = must_allocate(*pool, 5 * kMiB);
  const auto view = pool->chunks_of(p + 100);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->info.base, p);
  EXPECT_EQ(view->offset, 3 * kMiB) << "where the allocation lies in the extent it shares";
  ASSERT_EQ(view->chunks.size(), 1u);
  EXPECT_EQ(view->granules[0] * gran, 32 * kMiB);
  EXPECT_FALSE(view->host_chunks);
  pool->release_idle();
}

TEST_F(Carving, RandomMixedSizesOnThreadsKeepTheirBytesAndTheFiguresAddUp) {
  auto pool = make_pool(carving(512 * kMiB));
  std::vector<std::thread> threads;
  std::atomic<int> carved{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_CU(drv().cuCtxSetCurrent(ctx));
      std::mt19937_64 rng(100 + t);
      std::vector<Block> live;
      for (int step = 0; step < 300; ++step) {
        if (!live.empty() && (rng() % 2 == 0 || live.size() > 12)) {
          const std::size_t i = rng() % live.size();
          EXPECT_TRUE(holds(live[i].p, live[i].bytes, live[i].seed));
          must_free(*pool, live[i].p);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        const std::size_t choice = rng() % 10;
        const std::size_t bytes = choice < 3 ? 1 + rng() % kMiB : choice < 9 ? kMiB + rng() % (20 * kMiB) : 300 * kMiB;
        CUdeviceptr p = 0;
        if (pool->allocate(&p, bytes) != CUDA_SUCCESS) continue;  // the budget, shared by four threads
        if (bytes > kMiB && bytes <= 256 * kMiB) ++carved;
        const std::uint64_t seed = 1000 * t + step;
        fill(p, std::min<std::size_t>(bytes, 4 * kMiB), seed);
        live.push_back({p, std::min<std::size_t>(bytes, 4 * kMiB), seed});
      }
      for (const Block& b : live) must_free(*pool, b.p);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(carved.load(), 200) << "few carved allocations were made (about 400 expected)";
  EXPECT_EQ(pool->stats(0).live_allocations, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
}

}  // namespace
}  // namespace pooltest
