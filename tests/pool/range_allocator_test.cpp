// RangeAllocator: best-fit address ranges that coalesce within a region and never across two, even
// where the driver placed two reservations end to end (a mapping may not cross a reservation, and the
// address map keeps one entry array per region).
#include <gtest/gtest.h>

#include "pool/address_map.h"

namespace {

using uvmpool::pool::RangeAllocator;
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr CUdeviceptr kBase = 0x7000'0000'0000;

TEST(RangeAllocator, FreedNeighboursCoalesceWithinARegion) {
  RangeAllocator r;
  r.add(kBase, 16 * kMiB);
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 4; ++i) got.push_back(*r.take(4 * kMiB));
  EXPECT_FALSE(r.take(4 * kMiB).has_value());
  for (int i : {2, 0, 3, 1}) r.give_back(got[i], 4 * kMiB);
  EXPECT_EQ(r.take(16 * kMiB), kBase);
}

TEST(RangeAllocator, NoRangeSpansTwoRegionsPlacedEndToEnd) {
  RangeAllocator r;
  r.add(kBase, 16 * kMiB);
  r.add(kBase + 16 * kMiB, 16 * kMiB);
  EXPECT_TRUE(r.starts_region(kBase + 16 * kMiB));
  EXPECT_FALSE(r.starts_region(kBase + 8 * kMiB));
  EXPECT_FALSE(r.take(24 * kMiB).has_value()) << "a range across the two regions";
  const auto a = r.take(16 * kMiB), b = r.take(16 * kMiB);
  ASSERT_TRUE(a && b);
  r.give_back(*b, 16 * kMiB);
  r.give_back(*a, 16 * kMiB);
  EXPECT_FALSE(r.take(32 * kMiB).has_value()) << "given back, the two coalesced across the boundary";
  EXPECT_TRUE(r.take(16 * kMiB).has_value());
  EXPECT_TRUE(r.take(16 * kMiB).has_value());
}

// What carving's growth needs (CarvedRange): a chosen place taken out of the free range holding it,
// and the free ranges that meet a given address.
TEST(RangeAllocator, TakeAtSplitsTheFreeRangeAroundThePlaceAndRefusesWhatIsNotAllFree) {
  RangeAllocator r;
  r.give_back(kBase, 16 * kMiB);
  EXPECT_TRUE(r.take_at(kBase + 4 * kMiB, 4 * kMiB));
  EXPECT_EQ(r.free_bytes(), 12 * kMiB);
  EXPECT_EQ(r.free_ending_at(kBase + 4 * kMiB), kBase) << "the part before it";
  EXPECT_EQ(r.free_starting_at(kBase + 8 * kMiB), 8 * kMiB) << "the part after it";
  EXPECT_FALSE(r.take_at(kBase + 2 * kMiB, 4 * kMiB)) << "half of it is taken";
  EXPECT_FALSE(r.take_at(kBase + 12 * kMiB, 8 * kMiB)) << "past the free range's end";
  EXPECT_EQ(r.free_bytes(), 12 * kMiB) << "a refused take_at took something";
  EXPECT_FALSE(r.free_ending_at(kBase + 6 * kMiB).has_value());
  EXPECT_EQ(r.free_starting_at(kBase + 9 * kMiB), 0u);
  EXPECT_TRUE(r.take_at(kBase, 4 * kMiB));
  EXPECT_TRUE(r.take_at(kBase + 8 * kMiB, 8 * kMiB));
  EXPECT_EQ(r.free_bytes(), 0u);
  r.give_back(kBase + 4 * kMiB, 4 * kMiB);
  r.give_back(kBase, 4 * kMiB);
  r.give_back(kBase + 8 * kMiB, 8 * kMiB);
  EXPECT_EQ(r.take(16 * kMiB), kBase) << "given back, the pieces coalesced again";
}

// Avoid (RepeatPlaces::others_place through CarvedRange::Hint): the best fit it refuses is left to
// others while another range fits; with none, best fit anyway.
TEST(RangeAllocator, TakeLeavesTheRangesAvoidRefusesWhileAnotherFits) {
  RangeAllocator r;
  r.add(kBase, 64 * kMiB);
  // Free ranges of 4 MiB at kBase and 8 MiB at kBase + 16 MiB; the rest taken.
  ASSERT_TRUE(r.take_at(kBase + 4 * kMiB, 12 * kMiB));
  ASSERT_TRUE(r.take_at(kBase + 24 * kMiB, 40 * kMiB));
  const auto refuse_first = [](CUdeviceptr start, std::size_t) { return start == kBase; };
  EXPECT_EQ(r.take(2 * kMiB, refuse_first), kBase + 16 * kMiB) << "the 4 MiB run at kBase is left alone";
  EXPECT_EQ(r.take(2 * kMiB, refuse_first), kBase + 18 * kMiB);
  const auto refuse_all = [](CUdeviceptr, std::size_t) { return true; };
  EXPECT_EQ(r.take(2 * kMiB, refuse_all), kBase) << "all refused: best fit";
  EXPECT_EQ(r.take(2 * kMiB), kBase + 2 * kMiB);
}

}  // namespace
