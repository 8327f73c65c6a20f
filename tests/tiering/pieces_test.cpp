// Pieces (src/tiering/pieces.h): where launches' pointers cut allocations, and the policy moving
// those pieces (UVMPOOL_TIERING_UNIT=piece) on the simulated driver: a tensor moves without the rest
// of its segment, every byte kept and the race detector at 0 (the fixture checks it).
#include <gtest/gtest.h>

#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/pieces.h"

namespace {

using namespace pooltest;
using uvmpool::pool::AllocationInfo;
using uvmpool::tiering::TrialSetting;
using uvmpool::tiering::Mode;
using uvmpool::tiering::MoverConfig;
using uvmpool::tiering::Pieces;
using uvmpool::tiering::PolicyConfig;
using uvmpool::tiering::Stats;
using uvmpool::tiering::Tiering;

constexpr std::uint64_t kGranule = 2 * kMiB;

TEST(Pieces, APieceRunsFromAPointerRoundedDownToTheNextCutOrTheEnd) {
  Pieces pieces(kGranule);
  const AllocationInfo a{.base = 1ull << 40, .size = 100 * kMiB, .buffer_id = 7};
  // The first pointer: the piece runs to the allocation's end.
  Pieces::Piece p = pieces.cut(a, a.base + 40 * kMiB + 12345);
  EXPECT_EQ(p.base, a.base + 40 * kMiB) << "rounded down to the granule";
  EXPECT_EQ(p.bytes, 60 * kMiB);
  // A pointer before it: its piece ends where the first begins.
  p = pieces.cut(a, a.base + 10 * kMiB);
  EXPECT_EQ(p.base, a.base + 10 * kMiB);
  EXPECT_EQ(p.bytes, 30 * kMiB);
  // A pointer after it cuts the first piece short.
  p = pieces.cut(a, a.base + 70 * kMiB);
  EXPECT_EQ(p.bytes, 30 * kMiB);
  p = pieces.cut(a, a.base + 41 * kMiB);  // the same granule as the first: the same piece
  EXPECT_EQ(p.base, a.base + 40 * kMiB);
  EXPECT_EQ(p.bytes, 30 * kMiB);
  // A size not a multiple of the granule: the last piece ends at the allocation's end.
  const AllocationInfo odd{.base = 1ull << 41, .size = 5 * kMiB + 100, .buffer_id = 8};
  p = pieces.cut(odd, odd.base + 4 * kMiB + 50);
  EXPECT_EQ(p.base, odd.base + 4 * kMiB);
  EXPECT_EQ(p.bytes, kMiB + 100);
  // Not inside: the whole allocation, nothing noted.
  p = pieces.cut(a, a.base + a.size);
  EXPECT_EQ(p.base, a.base);
  EXPECT_EQ(p.bytes, a.size);
  EXPECT_EQ(pieces.cut(a, a.base + 70 * kMiB).bytes, 30 * kMiB) << "the pointer past the end cut nothing";
}

TEST(Pieces, AnotherAllocationAtTheSameBaseStartsWithoutTheOldCuts) {
  Pieces pieces(kGranule);
  const AllocationInfo old{.base = 1ull << 40, .size = 64 * kMiB, .buffer_id = 1};
  pieces.cut(old, old.base + 32 * kMiB);
  const AllocationInfo again{.base = old.base, .size = 64 * kMiB, .buffer_id = 2};
  const Pieces::Piece p = pieces.cut(again, again.base);
  EXPECT_EQ(p.bytes, 64 * kMiB) << "the freed allocation's cut at 32 MiB is not this one's";
  // Pruned: allocations no longer live lose their cuts.
  const AllocationInfo other{.base = 1ull << 41, .size = 8 * kMiB, .buffer_id = 3};
  pieces.cut(other, other.base);
  EXPECT_EQ(pieces.allocations(), 2u);
  pieces.prune([](CUdeviceptr, std::uint64_t id) { return id == 2; });
  EXPECT_EQ(pieces.allocations(), 1u);
}

TEST(Pieces, CutsStopAtTheBoundAndPiecesStillCoverThePointer) {
  Pieces pieces(kGranule);
  const std::uint64_t granules = Pieces::kMaxCuts + 10;
  const AllocationInfo a{.base = 1ull << 40, .size = granules * kGranule, .buffer_id = 1};
  for (std::uint64_t g = 0; g < Pieces::kMaxCuts; ++g) pieces.cut(a, a.base + g * kGranule);
  EXPECT_EQ(pieces.cut(a, a.base + 5 * kGranule).bytes, kGranule) << "a granule each, up to the bound";
  // Past the bound a pointer is not noted: it lies in the last piece, which runs to the end.
  const Pieces::Piece p = pieces.cut(a, a.base + (granules - 1) * kGranule);
  EXPECT_EQ(p.base, a.base + (Pieces::kMaxCuts - 1) * kGranule);
  EXPECT_EQ(p.bytes, 11 * kGranule);
}

class Pieces_ : public LaunchedTest {
 protected:
  void SetUp() override {
    LaunchedTest::SetUp();
    if (HasFatalFailure()) return;
    // Without extents every piece of the pool is a chunk (2 MiB), so a move carries the policy's
    // piece and no more. With them a move carries whole 32 MiB extents, and a tensor's neighbours
    // in the same extent move with it (docs/tiering.md, "Pieces").
    pool.reset();
    PoolConfig config = spill_config(kBudget);
    config.extent_size = 0;
    pool = make_pool(config);
    pool->stop_background();
  }
  struct Last {
    std::uint64_t promoted = 0, in_place = 0;  // in the last 8 periods: bytes promoted, launches read in place
  };
  // Two segments of 48 MiB (1.5x the 64 MiB budget), each three tensors of 16 MiB, all six read
  // once, then three of them (48 MiB) a period, a launch each, `periods` times in the same order,
  // through tiering as the launch hooks show them (the mover polled after each launch, the stream
  // synchronized after each period). Every tensor is checked after.
  Last train(bool pieces, int periods) {
    PolicyConfig policy;
    policy.pieces = pieces;
    policy.guard.setting = TrialSetting::Second;  // each tensor is read once a period: moved, not read in place
    policy.cold_after = 16;  // the tensors read only at first may go soon (a job's step is thousands of launches)
    MoverConfig mover;
    mover.thread = false;
    tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, mover, policy);
    segments.clear();
    for (int s = 0; s < 2; ++s) {
      segments.push_back(allocate(48 * kMiB));
      if (segments.back() == 0) return {};
      for (int t = 0; t < 3; ++t) EXPECT_CU(drv().cuMemsetD32_v2(tensor(s, t), value(s, t), 16 * kMiB / 4));
    }
    for (int s = 0; s < 2; ++s)
      for (int t = 0; t < 3; ++t) read_shown(tensor(s, t), 16 * kMiB, 1);
    Stats before;
    for (int i = 0; i < periods; ++i) {
      if (i == periods - 8) before = tiering->stats();
      for (const auto& [s, t] : {std::pair{0, 0}, std::pair{1, 2}, std::pair{0, 2}}) read_shown(tensor(s, t), 16 * kMiB, 1);
      end_period();
    }
    EXPECT_CU(tiering->mover().run_until_idle());
    for (int s = 0; s < 2; ++s)
      for (int t = 0; t < 3; ++t) EXPECT_TRUE(all_equal(tensor(s, t), 16 * kMiB, value(s, t))) << "segment " << s << ", tensor " << t;
    const Stats after = tiering->stats();
    return {after.promoted_bytes - before.promoted_bytes, after.launches_in_place - before.launches_in_place};
  }
  CUdeviceptr tensor(int s, int t) const { return segments[static_cast<std::size_t>(s)] + static_cast<CUdeviceptr>(t) * 16 * kMiB; }
  static std::uint32_t value(int s, int t) { return 0x7000u + static_cast<std::uint32_t>(s * 3 + t); }
  std::vector<CUdeviceptr> segments;
};

// The three tensors read fit the device, their two segments do not: by allocations the segment in
// host memory cannot come in without pushing out the one needed a launch later, and its tensor is
// read in place every period; by pieces that tensor comes in once, an unread one goes out, and all
// stay.
TEST_F(Pieces_, ATensorMovesWithoutTheRestOfItsSegment) {
  const Last whole = train(false, 40);
  const std::uint64_t learned_whole = tiering->policy_stats().periods_learned;
  free_all(segments);
  const Last by_pieces = train(true, 40);
  const Stats s = tiering->stats();
  EXPECT_GE(learned_whole, 1u);
  EXPECT_GE(tiering->policy_stats().periods_learned, 1u);
  EXPECT_EQ(whole.in_place, 8u) << "by allocations: a launch a period reads in place";
  EXPECT_GT(s.promoted_bytes, 0u) << "by pieces the tensor in host memory came in";
  EXPECT_EQ(by_pieces.in_place, 0u);
  EXPECT_EQ(by_pieces.promoted, 0u) << "by pieces, once in, nothing moves";
}

}  // namespace
