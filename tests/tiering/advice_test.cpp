// Advice and prefetches on pool memory (src/tiering/advice.h), on the simulated driver: a prefetch
// moves the pieces it covers at the mover's next epoch with their bytes; without auto nothing moves;
// bad calls get the driver's errors and move nothing; memory that is not the pool's is left to the
// driver; a preferred location reaches the policy's view and ends with its allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/advice.h"
#include "tiering/tiering.h"

namespace {

using namespace pooltest;
using uvmpool::pool::Tier;
using uvmpool::tiering::Mode;
using uvmpool::tiering::MoverConfig;
using uvmpool::tiering::Place;
using uvmpool::tiering::Preference;
using uvmpool::tiering::Tiering;

constexpr Place kDevice{Tier::Device, 0};
constexpr Place kHost{Tier::Host, -1};

class Advice_ : public TieringTest {
 protected:
  void SetUp() override {
    TieringTest::SetUp();
    if (HasFatalFailure()) return;
    pool->stop_background();  // the host reserve stays as the tests leave it
    CUcontext context = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&context));
    streams.created(stream, context, true);  // as the cuStreamCreate hook lists it
    make_tiering(Mode::Auto);
  }
  void TearDown() override {
    tiering.reset();
    streams.destroying(stream);
    TieringTest::TearDown();
  }
  void make_tiering(Mode mode) {
    tiering.reset();
    MoverConfig config;
    config.thread = false;  // epochs run when the test says
    tiering = std::make_unique<Tiering>(drv(), *pool, mode, streams, config);
  }

  // 8 MiB in device memory, 16 MiB past the budget in host memory, and 16 MiB of device memory freed
  // (the room a promotion takes), as the mover's tests set it up.
  void allocate_both_tiers() {
    on_device = allocate(8 * kMiB);
    allocate(device_chunks(kBudget) * gran - 24 * kMiB);
    const CUdeviceptr room = must_allocate(*pool, 16 * kMiB);
    in_host = allocate(16 * kMiB);
    ASSERT_EQ(tiers(on_device, 8 * kMiB, gran), "DDDD");
    ASSERT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
    must_free(*pool, room);
  }
  CUresult prefetch(CUdeviceptr p, std::size_t bytes, std::optional<Place> where, unsigned flags = 0,
                    bool* acted = nullptr) {
    const std::optional<CUresult> r =
        uvmpool::tiering::prefetch(*pool, tiering.get(), 1, p, bytes, where, flags, acted);
    EXPECT_TRUE(r.has_value()) << "pool memory left to the driver";
    return r.value_or(CUDA_ERROR_UNKNOWN);
  }
  CUresult advise(CUdeviceptr p, std::size_t bytes, CUmem_advise advice, std::optional<Place> where, int devices = 1) {
    const std::optional<CUresult> r = uvmpool::tiering::advise(*pool, tiering.get(), devices, p, bytes, advice, where);
    EXPECT_TRUE(r.has_value()) << "pool memory left to the driver";
    return r.value_or(CUDA_ERROR_UNKNOWN);
  }
  Preference preference(CUdeviceptr p) {
    const std::optional<uvmpool::pool::AllocationInfo> info = pool->find(p);
    EXPECT_TRUE(info.has_value());
    return info ? tiering->preference(*info) : Preference::None;
  }
  ::testing::AssertionResult holds(CUdeviceptr p, std::size_t bytes, std::uint32_t value) {
    std::vector<std::uint32_t> got(bytes / 4);
    if (const CUresult r = drv().cuMemcpyDtoH_v2(got.data(), p, bytes); r != CUDA_SUCCESS)
      return ::testing::AssertionFailure() << "cuMemcpyDtoH answered " << cu_name(r);
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != value) return ::testing::AssertionFailure() << "word " << i << " is " << got[i];
    return ::testing::AssertionSuccess();
  }

  uvmpool::tiering::StreamRegistry streams;
  std::unique_ptr<Tiering> tiering;
  CUdeviceptr on_device = 0, in_host = 0;
};

TEST_F(Advice_, APrefetchMovesTheRangeAtTheNextEpochWithItsBytes) {
  allocate_both_tiers();
  ASSERT_CU(drv().cuMemsetD32_v2(in_host, 0xab, 16 * kMiB / 4));
  ASSERT_CU(drv().cuMemsetD32_v2(on_device, 0xcd, 8 * kMiB / 4));
  bool acted = false;
  ASSERT_CU(prefetch(in_host, 16 * kMiB, kDevice, 0, &acted));
  EXPECT_TRUE(acted);
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH") << "moved before the epoch";
  ASSERT_CU(prefetch(on_device, 8 * kMiB, kHost));
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 0xab));
  EXPECT_TRUE(holds(on_device, 8 * kMiB, 0xcd));
  const uvmpool::tiering::Stats s = tiering->stats();
  EXPECT_EQ(s.prefetches, 2u);
  EXPECT_EQ(s.promoted_bytes, 16 * kMiB);
  EXPECT_EQ(s.demoted_bytes, 8 * kMiB);
}

TEST_F(Advice_, APrefetchOfPartOfAnAllocationMovesOnlyThePiecesItCovers) {
  allocate_both_tiers();
  ASSERT_CU(prefetch(in_host + 4 * kMiB + 1, 4 * kMiB - 2, kDevice));
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHDDHHHH");
  // Pieces already there ask for nothing.
  bool acted = true;
  ASSERT_CU(prefetch(in_host + 4 * kMiB, 4 * kMiB, kDevice, 0, &acted));
  EXPECT_FALSE(acted);
}

TEST_F(Advice_, WithoutAutoAPrefetchIsAcceptedAndNothingMoves) {
  allocate_both_tiers();
  for (const bool off : {false, true}) {
    SCOPED_TRACE(off ? "tiering off" : "remote");
    if (off) tiering.reset(); else make_tiering(Mode::Remote);
    bool acted = true;
    const std::optional<CUresult> r =
        uvmpool::tiering::prefetch(*pool, tiering.get(), 1, in_host, 16 * kMiB, kDevice, 0, &acted);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, CUDA_SUCCESS);
    EXPECT_FALSE(acted);
    const std::optional<CUresult> a = uvmpool::tiering::advise(*pool, tiering.get(), 1, in_host, 16 * kMiB,
                                                               CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kDevice, &acted);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, CUDA_SUCCESS);
    EXPECT_EQ(acted, !off) << "remote keeps the preference (the policy is auto's), off has nowhere to";
  }
  make_tiering(Mode::Auto);
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
}

TEST_F(Advice_, BadCallsGetTheDriversErrorsAndMoveNothing) {
  allocate_both_tiers();
  const CUdeviceptr freed = must_allocate(*pool, 2 * kMiB);
  must_free(*pool, freed);
  EXPECT_EQ(prefetch(in_host, 0, kDevice), CUDA_ERROR_INVALID_VALUE) << "no bytes";
  EXPECT_EQ(prefetch(in_host, 16 * kMiB, kDevice, 1), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(prefetch(in_host, 16 * kMiB, std::nullopt), CUDA_ERROR_INVALID_VALUE) << "a location the driver refuses";
  EXPECT_EQ(prefetch(in_host, 16 * kMiB, Place{Tier::Device, 1}), CUDA_ERROR_INVALID_DEVICE) << "no such device";
  EXPECT_EQ(prefetch(in_host, 16 * kMiB, Place{Tier::Device, -2}), CUDA_ERROR_INVALID_DEVICE) << "CU_DEVICE_INVALID";
  EXPECT_EQ(prefetch(in_host, ~std::size_t{0}, kDevice), CUDA_ERROR_INVALID_VALUE) << "wraps around";
  EXPECT_EQ(prefetch(in_host, 32 * kMiB, kDevice), CUDA_ERROR_INVALID_VALUE) << "past the allocation's end";
  EXPECT_EQ(prefetch(freed, 2 * kMiB, kDevice), CUDA_ERROR_INVALID_VALUE) << "a freed allocation";
  // 7: no advice, yet a value the enum can hold (UBSan refuses loading one it cannot).
  EXPECT_EQ(advise(in_host, 16 * kMiB, static_cast<CUmem_advise>(7), kDevice), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(advise(in_host, 16 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, std::nullopt), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(advise(in_host, 16 * kMiB, CU_MEM_ADVISE_SET_ACCESSED_BY, Place{Tier::Device, 3}), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(advise(freed, 2 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, std::nullopt), CUDA_ERROR_INVALID_VALUE);
  // The location is ignored where the driver ignores it.
  EXPECT_CU(advise(in_host, 16 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, std::nullopt));
  EXPECT_CU(advise(in_host, 16 * kMiB, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, std::nullopt));
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
  EXPECT_EQ(tiering->stats().moves, 0u);
  EXPECT_EQ(tiering->mover().stats().requested, 0u);
}

TEST_F(Advice_, MemoryThatIsNotThePoolsIsLeftToTheDriver) {
  CUdeviceptr foreign = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&foreign, 2 * kMiB));  // the driver's own, not the pool's
  EXPECT_FALSE(uvmpool::tiering::prefetch(*pool, tiering.get(), 1, foreign, 2 * kMiB, kDevice, 0).has_value());
  EXPECT_FALSE(uvmpool::tiering::advise(*pool, tiering.get(), 1, foreign, 2 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY,
                                        std::nullopt)
                   .has_value());
  // Which the simulated driver refuses, as a driver refuses memory cuMemAllocManaged did not make.
  EXPECT_EQ(drv().cuMemPrefetchAsync_v2(foreign, 2 * kMiB, CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, stream),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv().cuMemAdvise(foreign, 2 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(drv().cuMemFree_v2(foreign));
}

// A batch one of whose pool ranges is refused (no bytes) moves none of the others, and gives the
// driver nothing of its own part either (before, the ranges ahead of the refused one were asked).
TEST_F(Advice_, ABatchRefusedForOneOfThePoolsRangesMovesNone) {
  allocate_both_tiers();
  CUdeviceptr ptrs[3] = {in_host, 0x1000, on_device};
  std::size_t sizes[3] = {16 * kMiB, 4096, 0};
  CUmemLocation locations[1] = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  std::size_t first[1] = {0};
  int forwarded = 0;
  const auto r = uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 3, locations, first, 1, 0,
                                                  [&](auto&, auto&, auto&, auto&) {
                                                    ++forwarded;
                                                    return CUDA_SUCCESS;
                                                  });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(forwarded, 0) << "the driver's part of a refused batch was forwarded";
  EXPECT_EQ(tiering->mover().stats().requested, 0u) << "a refused batch asked the mover anyway";
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH") << "a refused batch moved memory";
}

TEST_F(Advice_, ABatchOfPrefetchesAnswersThePoolsRangesAndForwardsTheRest) {
  allocate_both_tiers();
  ASSERT_CU(drv().cuMemsetD32_v2(in_host, 0xab, 16 * kMiB / 4));
  const CUdeviceptr foreign_a = 0x1000, foreign_b = 0x9000;  // outside the pool's space
  // Ranges 0 and 1 to the device, 2 and 3 to the host: the first location applies from range 0, the
  // second from range 2.
  CUdeviceptr ptrs[4] = {in_host, foreign_a, on_device, foreign_b};
  std::size_t sizes[4] = {16 * kMiB, 4096, 8 * kMiB, 8192};
  CUmemLocation locations[2] = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, {CU_MEM_LOCATION_TYPE_HOST, 0}};
  std::size_t first[2] = {0, 2};
  int forwarded = 0;
  const auto forward = [&](std::vector<CUdeviceptr>& p, std::vector<std::size_t>& n, std::vector<CUmemLocation>& l,
                           std::vector<std::size_t>& f) {
    ++forwarded;
    EXPECT_EQ(p, (std::vector<CUdeviceptr>{foreign_a, foreign_b}));
    EXPECT_EQ(n, (std::vector<std::size_t>{4096, 8192}));
    EXPECT_EQ(f, (std::vector<std::size_t>{0, 1}));
    EXPECT_EQ(l.size(), 2u);
    if (l.size() == 2) {
      EXPECT_EQ(l[0].type, CU_MEM_LOCATION_TYPE_DEVICE);
      EXPECT_EQ(l[1].type, CU_MEM_LOCATION_TYPE_HOST);
    }
    return CUDA_SUCCESS;
  };
  std::optional<CUresult> r = uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 4, locations,
                                                               first, 2, 0, forward);
  ASSERT_TRUE(r.has_value());
  ASSERT_CU(*r);
  EXPECT_EQ(forwarded, 1);
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 0xab));
  EXPECT_EQ(tiering->stats().prefetches, 2u);

  // A batch the driver refuses is refused before any pool memory moves.
  ptrs[0] = in_host;
  locations[0] = {CU_MEM_LOCATION_TYPE_HOST, 0};
  r = uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 4, locations, first, 2, 0,
                                       [](auto&, auto&, auto&, auto&) { return CUDA_ERROR_INVALID_VALUE; });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(tiering->mover().stats().requested, 2u) << "nothing more asked of the mover";

  // None of the pool's, or malformed: the driver's to answer as made.
  const auto never = [](auto&, auto&, auto&, auto&) {
    ADD_FAILURE() << "forwarded";
    return CUDA_SUCCESS;
  };
  CUdeviceptr theirs[1] = {foreign_a};
  EXPECT_FALSE(
      uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, theirs, sizes, 1, locations, first, 1, 0, never));
  std::size_t late[2] = {1, 2};
  EXPECT_FALSE(uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 4, locations, late, 2, 0, never));
  EXPECT_FALSE(uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 4, locations, first, 2, 1, never));
  EXPECT_FALSE(uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, nullptr, sizes, 4, locations, first, 2, 0, never));
  EXPECT_FALSE(uvmpool::tiering::prefetch_batch(*pool, tiering.get(), 1, ptrs, sizes, 4, locations, first, 0, 0, never));
}

TEST_F(Advice_, APreferredLocationReachesThePolicyAndEndsWithItsAllocation) {
  allocate_both_tiers();
  EXPECT_EQ(preference(in_host), Preference::None);
  ASSERT_CU(advise(in_host + kMiB, kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  EXPECT_EQ(preference(in_host), Preference::Host) << "the whole allocation takes it";
  EXPECT_EQ(preference(on_device), Preference::None);
  ASSERT_CU(advise(on_device, 8 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kDevice));
  EXPECT_EQ(preference(on_device), Preference::Device);
  // Another device's memory is no place for this allocation: no preference.
  ASSERT_CU(advise(on_device, 8 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Place{Tier::Device, 1}, 2));
  EXPECT_EQ(preference(on_device), Preference::None);
  ASSERT_CU(advise(in_host, 16 * kMiB, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, std::nullopt));
  EXPECT_EQ(preference(in_host), Preference::None);
  // A new allocation at a freed one's address does not inherit its advice.
  const CUdeviceptr a = must_allocate(*pool, 2 * kMiB);
  ASSERT_CU(advise(a, 2 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  EXPECT_EQ(preference(a), Preference::Host);
  must_free(*pool, a);
  const CUdeviceptr b = allocate(2 * kMiB);
  ASSERT_EQ(b, a) << "the pool handed the address out again (the test relies on it)";
  EXPECT_EQ(preference(b), Preference::None);
  EXPECT_EQ(tiering->stats().advice, 5u);
}

// Advice over a range of many allocations is taken, however many (it was refused past 4096, a limit
// the driver does not have).
TEST_F(Advice_, AdviceOverARangeOfManyAllocationsIsTaken) {
  constexpr std::size_t kSize = 512, kCount = 6000;
  std::vector<CUdeviceptr> got;
  for (std::size_t i = 0; i < kCount; ++i) got.push_back(allocate(kSize));
  std::sort(got.begin(), got.end());
  // The longest run of allocations that follow one another without a gap.
  std::size_t best_first = 0, best_length = 1;
  for (std::size_t first = 0, i = 1; i <= got.size(); ++i) {
    if (i < got.size() && got[i] == got[i - 1] + kSize) continue;
    if (i - first > best_length) best_first = first, best_length = i - first;
    first = i;
  }
  ASSERT_GT(best_length, 4096u) << "the pool placed small allocations apart (the test relies on runs)";
  const CUdeviceptr first = got[best_first], last = got[best_first + best_length - 1];
  ASSERT_CU(advise(first, last + kSize - first, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  EXPECT_EQ(preference(first), Preference::Host);
  EXPECT_EQ(preference(last), Preference::Host);
  bool acted = false;
  EXPECT_CU(prefetch(first, last + kSize - first, kDevice, 0, &acted));
}

// Allocations that share a carved slot move with it, whole (src/pool/carved_moves.cpp): 32 MiB slots,
// carving up to 16 MiB, under the fixture's 64 MiB budget.
class CarvedAdvice_ : public LaunchedTest {
 protected:
  static constexpr std::size_t kSlot = 32 * kMiB;
  void SetUp() override {
    LaunchedTest::SetUp();
    if (HasFatalFailure()) return;
    pool.reset();
    PoolConfig config = spill_config(kBudget, 128 * kMiB, 0);
    config.extent_size = kSlot;
    config.carve_max = 16 * kMiB;
    pool = make_pool(config);
    pool->stop_background();
    MoverConfig mover;
    mover.thread = false;
    tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, mover);
    a = allocate(3 * kMiB);
    b = allocate(5 * kMiB);
    const auto slots = pool->carved_slots(a, a + 1);
    ASSERT_TRUE(slots.has_value()) << "not carved";
    ASSERT_EQ(slots->slot_bytes, kSlot);
    slot = slots->start;
    ASSERT_TRUE(b >= slot && b + 5 * kMiB <= slot + kSlot) << "the pool put the two in different slots (the tests rely on one)";
  }
  CUresult advise(CUdeviceptr p, std::size_t bytes, CUmem_advise advice, std::optional<Place> where) {
    return uvmpool::tiering::advise(*pool, tiering.get(), 1, p, bytes, advice, where).value_or(CUDA_ERROR_UNKNOWN);
  }
  CUdeviceptr a = 0, b = 0, slot = 0;
};

// The slot answers to all of its allocations: the device while any prefers it, the host only while
// all do. Freed allocations no longer count.
TEST_F(CarvedAdvice_, ASlotPrefersTheDeviceIfAnyOfItsAllocationsDoesAndTheHostOnlyIfAllDo) {
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::None);
  ASSERT_CU(advise(b, 5 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::None) << "the other allocation has no preference";
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kDevice));
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::Device);
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::Host);
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, std::nullopt));
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::None);
  must_free(*pool, a);
  std::erase(allocated, a);
  EXPECT_EQ(tiering->slot_preference(slot, kSlot), Preference::Host) << "the one left prefers the host";
}

// A slot in host memory holding an allocation that prefers the device and one that prefers the host:
// a launch reading the second brings the slot in, as the first needs. (The slot took the preference
// of the allocation a launch touched: kept in host memory by the second's advice.)
TEST_F(CarvedAdvice_, ASlotInHostMemoryIsPromotedForTheAllocationInItThatPrefersTheDevice) {
  ASSERT_CU(drv().cuMemsetD32_v2(a, 0xa1, 3 * kMiB / 4));
  ASSERT_CU(drv().cuMemsetD32_v2(b, 0xb2, 5 * kMiB / 4));
  ASSERT_EQ(uvmpool::tiering::prefetch(*pool, tiering.get(), 1, b, 5 * kMiB, kHost, 0).value_or(CUDA_ERROR_UNKNOWN),
            CUDA_SUCCESS);
  ASSERT_CU(tiering->mover().run_until_idle());
  ASSERT_EQ(tiers(slot, kSlot, gran), std::string(kSlot / gran, 'H')) << "the slot went to host memory whole";
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kDevice));
  ASSERT_CU(advise(b, 5 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  read_shown(b, 5 * kMiB, 1);
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiering->policy_stats().kept_by_advice, 0u) << "kept in host memory for the allocation that prefers it";
  EXPECT_EQ(tiers(slot, kSlot, gran), std::string(kSlot / gran, 'D'));
  EXPECT_TRUE(all_equal(a, 3 * kMiB, 0xa1));
  EXPECT_TRUE(all_equal(b, 5 * kMiB, 0xb2));
}

// Advice reaches a slot the policy knows at once, not at its next touch: the slot, known as preferring
// the host from a launch while both of its allocations did, is not demoted to make room once one of
// them is advised to stay. (It was: the first to go, as advised to lie in host memory.)
TEST_F(CarvedAdvice_, AdviceReachesASlotThePolicyKnowsBeforeItIsTouchedAgain) {
  // The device full (30 of the 32 MiB left past the slot, not carved: the pool keeps a chunk), and 24
  // MiB more in host memory.
  const CUdeviceptr on_device = allocate(30 * kMiB);
  const CUdeviceptr spilled = allocate(24 * kMiB);
  ASSERT_EQ(tiers(on_device, 30 * kMiB, gran), std::string(30 * kMiB / gran, 'D'));
  ASSERT_EQ(tiers(spilled, 24 * kMiB, gran), std::string(24 * kMiB / gran, 'H'));
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  ASSERT_CU(advise(b, 5 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kHost));
  read_shown(b, 5 * kMiB, 1);  // known: both allocations in the slot prefer the host
  ASSERT_EQ(tiering->policy_stats().launches, 1u);
  ASSERT_CU(advise(a, 3 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, kDevice));
  read_shown(spilled, 24 * kMiB, 1);
  ASSERT_CU(tiering->mover().run_until_idle());
  EXPECT_EQ(tiering->policy_stats().demotions, 0u);
  EXPECT_EQ(tiers(slot, kSlot, gran), std::string(kSlot / gran, 'D')) << "demoted for the spilled allocation";
}

}  // namespace
