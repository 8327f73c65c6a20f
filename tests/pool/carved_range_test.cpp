// CarvedRange (src/pool/carved_range.h): allocations carved out of extents mapped once. Driven here
// on its own, on the simulated driver, with a source that makes extents on demand and keeps what
// comes back; the device pool does not use it yet. Every test checks the data the allocations hold
// and the range's invariants.
#include <algorithm>
#include <map>
#include <random>

#include "driver/real_driver.h"
#include "pool/carved_range.h"
#include "pool_test.h"

namespace pooltest {
namespace {

using uvmpool::pool::CarvedRange;
using uvmpool::pool::Chunk;
using uvmpool::pool::Handle;
using uvmpool::pool::Vmm;

constexpr std::size_t kExtent = 32 * kMiB;
constexpr std::size_t kUnit = 64 * 1024;
constexpr std::size_t kSlots = 8;  // the range: 256 MiB of address space

// Extents made with cuMemCreate on demand, up to `limit`; what comes back is kept and handed out again.
class TestSource : public CarvedRange::Source {
 public:
  TestSource(const Vmm& vmm, std::size_t chunk) : vmm_(vmm), chunk_(chunk) {}
  ~TestSource() override {
    for (const Chunk& c : spare_) vmm_.release_chunks({&c.handle, 1});
  }
  CUresult take(std::size_t granules, std::vector<Chunk>* pieces) override {
    if (split) {  // one piece a chunk, as the pool maps a slot when its free memory has no extent
      for (std::size_t i = 0; i < granules; ++i) {
        Handle h = 0;
        if (const CUresult r = vmm_.create_chunks({&h, 1}, chunk_); r != CUDA_SUCCESS) return r;
        pieces->push_back(Chunk{h, uvmpool::pool::Tier::Device, 1});
      }
      return CUDA_SUCCESS;
    }
    if (!spare_.empty()) {
      pieces->push_back(spare_.back());
      spare_.pop_back();
      return CUDA_SUCCESS;
    }
    if (made == limit) return CUDA_ERROR_OUT_OF_MEMORY;
    Handle h = 0;
    if (const CUresult r = vmm_.create_chunks({&h, 1}, granules * chunk_); r != CUDA_SUCCESS) return r;
    ++made;
    pieces->push_back(Chunk{h, uvmpool::pool::Tier::Device, static_cast<std::uint32_t>(granules)});
    return CUDA_SUCCESS;
  }
  // With `groups` on, one handle for several slots (as the pool makes them while its budget has room).
  CUresult take_group(std::size_t granules, Chunk* piece) override {
    if (!groups) return CUDA_ERROR_OUT_OF_MEMORY;
    Handle h = 0;
    if (const CUresult r = vmm_.create_chunks({&h, 1}, granules * chunk_); r != CUDA_SUCCESS) return r;
    ++groups_made;
    *piece = Chunk{h, uvmpool::pool::Tier::Device, static_cast<std::uint32_t>(granules)};
    return CUDA_SUCCESS;
  }
  void give_back(std::span<const Chunk> pieces) override {
    for (const Chunk& c : pieces) {
      if (c.granules * chunk_ < kExtent) {  // a split slot's piece
        vmm_.release_chunks({&c.handle, 1});
      } else if (c.granules * chunk_ > kExtent) {  // a group's handle: no slot takes it alone
        vmm_.release_chunks({&c.handle, 1});
        ++groups_given_back;
      } else if (c.tier == uvmpool::pool::Tier::Host) {
        vmm_.release_chunks({&c.handle, 1});  // a slot moved to host memory (the tests' own moves): not handed out again
        ++host_given_back;
      } else {
        spare_.push_back(c);
      }
    }
  }
  void before_unmap() override { ++fences; }
  void mapped(CUdeviceptr va, std::span<const Chunk> pieces) override {
    mapped_bytes += uvmpool::pool::granules_of(pieces) * chunk_;
    (void)va;
  }
  void unmapped(CUdeviceptr, std::span<const Chunk> pieces) override { mapped_bytes -= uvmpool::pool::granules_of(pieces) * chunk_; }

  std::size_t spare() const { return spare_.size(); }
  std::size_t limit = SIZE_MAX;  // extents it may make
  std::size_t made = 0;
  std::size_t fences = 0;
  std::size_t host_given_back = 0;
  bool groups = false;
  bool split = false;  // slots mapped with one piece a chunk
  std::size_t groups_made = 0, groups_given_back = 0;
  std::uint64_t mapped_bytes = 0;  // as told by mapped / unmapped

 private:
  const Vmm& vmm_;
  const std::size_t chunk_;
  std::vector<Chunk> spare_;
};

class CarvedRangeTest : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    vmm_.emplace(uvmpool::driver::fn(), 0);
    ASSERT_CU(vmm_->reserve(&base_, kSlots * kExtent, kExtent));
    source_.emplace(*vmm_, gran);
    range_.emplace(*vmm_, *source_, base_, kSlots * kExtent, kExtent, gran, kUnit);
  }
  void TearDown() override {
    if (range_) {
      EXPECT_EQ(range_->check_invariants(), "");
      range_.reset();
      EXPECT_EQ(source_->mapped_bytes, 0u) << "the range was destroyed with slots still mapped";
    }
    source_.reset();
    if (vmm_) vmm_->free_reservation(base_, kSlots * kExtent);
    PoolTest::TearDown();
  }

  CUdeviceptr carve(std::size_t bytes, std::uint64_t seed) {
    CUdeviceptr p = 0;
    EXPECT_CU(range_->allocate(bytes, &p)) << bytes << " bytes";
    if (p != 0) {
      fill(p, bytes, seed);
      blocks_[p] = Block{p, bytes, seed};
    }
    return p;
  }
  void uncarve(CUdeviceptr p) {
    EXPECT_CU(range_->free(p));
    blocks_.erase(p);
  }
  // Every live allocation still holds its pattern, and the range is consistent.
  void check() {
    for (const auto& [p, b] : blocks_) EXPECT_TRUE(holds(b.p, b.bytes, b.seed)) << "at " << p;
    EXPECT_EQ(range_->check_invariants(), "");
  }
  unsigned long long maps() const { return sim().call_count("cuMemMap"); }
  // Moves a mapped slot to host memory as the pool's carved_moves.cpp does: claimed, copied through a
  // staging mapping of a host extent, remapped onto it, swapped, unclaimed.
  void move_to_host(std::size_t slot) {
    using uvmpool::pool::Tier;
    ASSERT_CU(range_->claim(slot));
    Handle h = 0;
    ASSERT_CU(vmm_->create_chunks({&h, 1}, kExtent, Tier::Host));
    const Chunk host{h, Tier::Host, static_cast<std::uint32_t>(kExtent / gran)};
    CUdeviceptr staging = 0;
    ASSERT_CU(vmm_->staging(host, gran, &staging));
    ASSERT_CU(drv().cuMemcpyDtoD_v2(staging, range_->slot_start(slot), kExtent));
    const std::vector<Chunk> old(range_->slot_pieces(slot).begin(), range_->slot_pieces(slot).end());
    ASSERT_CU(vmm_->remap(range_->slot_start(slot), old, {&host, 1}, gran));
    source_->give_back(old);
    range_->swapped(slot, {host});
    range_->unclaim(slot);
  }

  std::optional<Vmm> vmm_;
  CUdeviceptr base_ = 0;
  std::optional<TestSource> source_;
  std::optional<CarvedRange> range_;
  std::map<CUdeviceptr, Block> blocks_;
};

// A slot moved to host memory (the pool's carved_moves.cpp does these steps): claimed, copied, remapped
// onto a host extent, swapped. Its free space is then withheld (no new allocation lands in host
// memory), it is not reused as an idle slot, and once it holds nothing release_idle_host gives it back.
TEST_F(CarvedRangeTest, ASlotInHostMemoryWithholdsItsFreeSpaceAndIsGivenBackEmpty) {
  const CUdeviceptr a = carve(8 * kMiB, 1), b = carve(8 * kMiB, 2);  // slot 0, half free
  const std::optional<std::size_t> slot = range_->slot_of(a);
  ASSERT_TRUE(slot.has_value());
  ASSERT_EQ(range_->slot_of(b), slot);
  ASSERT_CU(range_->claim(*slot));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, range_->claim(*slot)) << "claimed twice";
  EXPECT_TRUE(range_->moving(b + 100, 1));
  range_->unclaim(*slot);
  move_to_host(*slot);
  if (HasFatalFailure()) return;
  EXPECT_EQ(range_->figures().slots_host, 1u);
  check();

  const CUdeviceptr c = carve(4 * kMiB, 4);
  EXPECT_NE(range_->slot_of(c), slot) << "carved into the free space of a slot in host memory";
  uncarve(a);
  uncarve(b);
  EXPECT_EQ(range_->idle_host_slots(), 1u);
  EXPECT_EQ(range_->figures().slots_idle, 0u) << "a host slot is no idle device memory";
  EXPECT_EQ(range_->release_idle(8), 0u) << "release_idle gives back device slots only";
  check();
  const std::size_t fences = source_->fences;
  EXPECT_EQ(range_->release_idle_host(), 1u);
  EXPECT_GT(source_->fences, fences) << "unmapped without the fence";
  EXPECT_EQ(source_->host_given_back, 1u);
  EXPECT_FALSE(range_->slot_of(a).has_value()) << "still mapped";
  EXPECT_EQ(range_->figures().slots_host, 0u);
  check();
}

// A free spanning slots gives each run of device slots of one lane back in one piece (one index update
// for a 1 GiB free, not 32) and withholds what lies in a slot in host memory: the runs end where the
// slots' tiers change.
TEST_F(CarvedRangeTest, AFreeAcrossAHostSlotGivesBackTheDeviceSlotsAroundItAndWithholdsIt) {
  const CUdeviceptr a = carve(4 * kExtent, 1);  // slots 0 to 3
  const std::optional<std::size_t> first = range_->slot_of(a);
  ASSERT_TRUE(first.has_value());
  move_to_host(*first + 1);
  if (HasFatalFailure()) return;
  check();
  uncarve(a);
  check();
  EXPECT_EQ(range_->idle_host_slots(), 1u);
  EXPECT_EQ(range_->figures().slots_idle, 3u) << "the device slots on either side of the host slot";
  // The free space given back is the three device slots, in two runs: the one before the host slot
  // (one slot) and the two after it together.
  const CUdeviceptr two = carve(2 * kExtent, 2);
  EXPECT_EQ(range_->slot_of(two), *first + 2) << "the two device slots after the host slot, as one run";
  const CUdeviceptr one = carve(kExtent, 3);
  EXPECT_EQ(range_->slot_of(one), *first) << "the device slot before the host slot";
  EXPECT_EQ(range_->figures().slots_host, 1u);
  check();
}

// Groups (carved_range.h): the new slots a request covers whole share one handle, mapped once; a slot
// it covers in part is a slot of its own. The pieces the range reports are the mappings'.
TEST_F(CarvedRangeTest, NewSlotsARequestCoversWholeShareOneHandle) {
  source_->groups = true;
  const unsigned long long before = maps();
  const CUdeviceptr a = carve(3 * kExtent + 4 * kMiB, 1);  // slots 0 to 2 whole, slot 3 in part
  ASSERT_EQ(a, base_);
  EXPECT_EQ(maps() - before, 2u) << "the group's handle and the last slot's extent";
  EXPECT_EQ(source_->groups_made, 1u);
  EXPECT_EQ(range_->figures().groups, 1u);
  EXPECT_EQ(range_->mapping_first(2), 0u);
  EXPECT_EQ(range_->mapping_slots(1), 3u);
  EXPECT_EQ(range_->mapping_slots(3), 1u) << "a slot the request covers in part stays a slot of its own";
  CUdeviceptr first = 0;
  const std::vector<Chunk> pieces = range_->pieces_of(a + kExtent, kMiB, &first);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(first, base_) << "a group's pieces are its handle whole, from its first slot";
  EXPECT_EQ(pieces[0].granules * gran, 3 * kExtent);
  std::size_t mappings = 0;
  range_->for_each_mapped([&](CUdeviceptr, std::span<const Chunk>) { ++mappings; });
  EXPECT_EQ(mappings, 2u);
  check();
  uncarve(a);
  check();
}

// A group maps whole, so it is given back only once every member is idle, and is taken for growth
// elsewhere only whole, by a window with room for all of it.
TEST_F(CarvedRangeTest, AGroupIsGivenBackOrReusedOnlyWhole) {
  source_->groups = true;
  const CUdeviceptr a = carve(2 * kExtent, 1);  // slots 0 and 1: a group
  const CUdeviceptr b = carve(kExtent, 2);      // slot 2
  ASSERT_EQ(range_->mapping_slots(0), 2u);
  uncarve(a);
  const CUdeviceptr c = carve(4 * kMiB, 3);  // best fit: the group's free space, in slot 0
  ASSERT_EQ(range_->slot_of(c), 0u);
  EXPECT_EQ(range_->figures().slots_idle, 1u) << "slot 1";
  EXPECT_EQ(range_->release_idle(8), 0u) << "slot 1 is idle, its group is not";
  EXPECT_EQ(range_->mapping_slots(1), 2u);
  uncarve(c);
  check();
  const std::size_t fences = source_->fences;
  EXPECT_EQ(range_->release_idle(8), 2u) << "the group, whole";
  EXPECT_GT(source_->fences, fences);
  EXPECT_EQ(source_->groups_given_back, 1u);
  EXPECT_FALSE(range_->slot_of(base_).has_value());
  check();

  // Reused whole: a group of two made again (slots 3 and 4, past b), freed, then a request of three
  // slots past the range's end takes the idle group with one new extent, and no second group is made.
  const CUdeviceptr d = carve(2 * kExtent, 4);
  const std::size_t group_slot = *range_->slot_of(d);
  ASSERT_EQ(range_->mapping_slots(group_slot), 2u);
  const CUdeviceptr keep = carve(kExtent, 5);  // past it, so that the group is not at the end
  uncarve(d);
  source_->groups = false;  // new memory one slot at a time: the group reused is the only one
  const std::size_t made = source_->made;
  const CUdeviceptr e = carve(3 * kExtent, 6);
  EXPECT_GT(*range_->slot_of(e), group_slot);
  EXPECT_EQ(range_->figures().remapped, 2u) << "the idle group's two slots";
  EXPECT_LE(source_->made - made, 1u);
  EXPECT_FALSE(range_->slot_of(d).has_value()) << "unmapped where it was";
  check();
  uncarve(e);
  uncarve(keep);
  uncarve(b);
  check();
}

// A group moved (the pool's carved_moves.cpp): claimed whole, copied, remapped onto pieces of a slot
// each; its members are slots of their own after it. A target piece spanning two slots is refused by
// splits_into_slots.
TEST_F(CarvedRangeTest, AMovedGroupIsSlotsOfTheirOwn) {
  using uvmpool::pool::Tier;
  source_->groups = true;
  const CUdeviceptr a = carve(2 * kExtent, 1);
  ASSERT_EQ(range_->mapping_slots(0), 2u);
  ASSERT_CU(range_->claim(1));
  EXPECT_TRUE(range_->moving(a, 1)) << "a claim of either member claims both";
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, range_->claim(0));
  std::vector<Chunk> host;
  for (int k = 0; k < 2; ++k) {
    Handle h = 0;
    ASSERT_CU(vmm_->create_chunks({&h, 1}, kExtent, Tier::Host));
    host.push_back(Chunk{h, Tier::Host, static_cast<std::uint32_t>(kExtent / gran)});
  }
  EXPECT_TRUE(range_->splits_into_slots(host));
  const Chunk wide{host[0].handle, Tier::Host, static_cast<std::uint32_t>(2 * kExtent / gran)};
  EXPECT_FALSE(range_->splits_into_slots({&wide, 1}));
  for (std::size_t k = 0; k < 2; ++k) {
    CUdeviceptr staging = 0;
    ASSERT_CU(vmm_->staging(host[k], gran, &staging));
    ASSERT_CU(drv().cuMemcpyDtoD_v2(staging, a + k * kExtent, kExtent));
  }
  const std::vector<Chunk> old = range_->mapping_pieces(0);
  ASSERT_EQ(old.size(), 1u);
  ASSERT_CU(vmm_->remap(base_, old, host, gran));
  source_->give_back(old);
  range_->swapped(0, host);
  range_->unclaim(0);
  range_->unclaim(1);
  EXPECT_EQ(range_->mapping_slots(0), 1u);
  EXPECT_EQ(range_->mapping_slots(1), 1u);
  EXPECT_EQ(range_->figures().slots_host, 2u);
  check();
  uncarve(a);
  EXPECT_EQ(range_->release_idle_host(), 2u) << "each slot on its own";
  check();
}

TEST_F(CarvedRangeTest, AllocationsShareAnExtentMappedOnce) {
  sim().reset_counts();
  std::vector<CUdeviceptr> got;
  for (int i = 0; i < 10; ++i) got.push_back(carve(3 * kMiB + 1000, 10 + i));
  EXPECT_EQ(maps(), 1u) << "ten allocations of 3 MiB: one extent, mapped once";
  EXPECT_EQ(sim().call_count("cuMemSetAccess"), 1u);
  EXPECT_EQ(source_->made, 1u);
  for (std::size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i] - got[i - 1], 3 * kMiB + kUnit) << "rounded up to the unit, side by side";
  }
  const auto f = range_->figures();
  EXPECT_EQ(f.slots_mapped, 1u);
  EXPECT_EQ(f.allocations, 10u);
  EXPECT_EQ(f.live_bytes, 10 * (3 * kMiB + kUnit));
  check();
}

TEST_F(CarvedRangeTest, FreedSpaceIsReusedBestFitWithNoDriverCall) {
  const CUdeviceptr a = carve(8 * kMiB, 1), b = carve(3 * kMiB, 2), c = carve(4 * kMiB, 3), d = carve(3 * kMiB, 4);
  carve(4 * kMiB, 5);
  uncarve(a);  // an 8 MiB hole
  uncarve(c);  // a 4 MiB hole
  sim().reset_counts();
  EXPECT_EQ(carve(3 * kMiB, 6), c) << "the smallest hole that holds it";
  EXPECT_EQ(carve(5 * kMiB, 7), a);
  EXPECT_EQ(maps() + sim().call_count("cuMemUnmap"), 0u) << "reuse called the driver";
  uncarve(b);
  uncarve(d);
  check();
}

// Tiering moves a slot whole: small requests (at most a sixteenth of a slot, 2 MiB here) are carved
// from slots of their own, not into the gaps beside large ones (carved_range.h, "Two lanes").
TEST_F(CarvedRangeTest, SmallAndLargeRequestsAreCarvedFromSlotsOfTheirOwnLane) {
  const CUdeviceptr big0 = carve(8 * kMiB, 1), small0 = carve(kMiB, 2), big1 = carve(8 * kMiB, 3);
  const CUdeviceptr small1 = carve(2 * kMiB, 4), big2 = carve(2 * kMiB + kUnit, 5);
  const auto slot = [&](CUdeviceptr p) { return *range_->slot_of(p); };
  EXPECT_EQ(big1, big0 + 8 * kMiB) << "large ones one after another, nothing small between them";
  EXPECT_EQ(big2, big1 + 8 * kMiB) << "just over a sixteenth of a slot is large";
  EXPECT_EQ(small1, small0 + kMiB);
  EXPECT_NE(slot(small0), slot(big0));
  EXPECT_EQ(range_->slot_lane(slot(big0)), CarvedRange::Lane::Large);
  EXPECT_EQ(range_->slot_lane(slot(small0)), CarvedRange::Lane::Small);
  EXPECT_EQ(range_->figures().slots_mapped, 2u);
  // Neither lane's free space serves the other: 20 MiB of the large slot are free, yet a small
  // request stays in its slot, and a large one too big for the large slot's gap grows, past it.
  EXPECT_EQ(slot(carve(kMiB, 6)), slot(small0));
  EXPECT_EQ(range_->figures().slots_mapped, 2u);
  check();
}

// A slot with nothing in it serves either lane: it changes lane with no driver call.
TEST_F(CarvedRangeTest, AnIdleSlotChangesLaneWithNoDriverCall) {
  std::vector<CUdeviceptr> small;
  for (int i = 0; i < 16; ++i) small.push_back(carve(2 * kMiB, 1 + i));  // one small slot, full
  const CUdeviceptr big = carve(4 * kMiB, 20);                              // a large slot
  ASSERT_EQ(range_->figures().slots_mapped, 2u);
  for (CUdeviceptr p : small) uncarve(p);
  sim().reset_counts();
  const CUdeviceptr p = carve(30 * kMiB, 21);  // more than the large slot has free
  EXPECT_EQ(p, small.front()) << "the idle small slot, taken by the large lane";
  EXPECT_EQ(maps() + sim().call_count("cuMemUnmap"), 0u);
  EXPECT_EQ(range_->slot_lane(*range_->slot_of(p)), CarvedRange::Lane::Large);
  EXPECT_EQ(range_->figures().relaned, 1u);
  EXPECT_EQ(range_->figures().slots_mapped, 2u);
  uncarve(big);
  check();
}

TEST_F(CarvedRangeTest, FreedNeighboursMergeAndAnAllocationSpansSlots) {
  const CUdeviceptr a = carve(20 * kMiB, 1), b = carve(20 * kMiB, 2), c = carve(20 * kMiB, 3);
  EXPECT_EQ(b, a + 20 * kMiB);
  EXPECT_EQ(c, b + 20 * kMiB) << "across the first slot's end";
  EXPECT_EQ(range_->figures().slots_mapped, 2u);
  uncarve(b);
  uncarve(a);
  sim().reset_counts();
  EXPECT_EQ(carve(40 * kMiB, 4), a) << "the two freed allocations merged";
  EXPECT_EQ(maps(), 0u);
  const CUdeviceptr big = carve(100 * kMiB, 5);
  EXPECT_EQ(big, c + 20 * kMiB) << "grown from the free space the mapped part ends in";
  EXPECT_EQ(range_->figures().slots_mapped, 5u);
  check();
}

TEST_F(CarvedRangeTest, GrowthMovesIdleSlotsBeforeMakingExtents) {
  std::vector<CUdeviceptr> full;
  for (int i = 0; i < 4; ++i) full.push_back(carve(kExtent, 1 + i));  // slots 0-3, one allocation each
  uncarve(full[1]);  // slot 1 idle
  const std::size_t fences = source_->fences;
  const CUdeviceptr p = carve(kExtent + kMiB, 9);  // fits nowhere mapped: two slots at the end
  EXPECT_EQ(p, base_ + 4 * kExtent);
  const auto f = range_->figures();
  EXPECT_EQ(f.remapped, 1u) << "the idle slot was not moved to where growth needed it";
  EXPECT_EQ(source_->made, 5u) << "4 made, 1 moved, 1 more made";
  EXPECT_EQ(f.slots_mapped, 5u);
  EXPECT_EQ(f.slots_idle, 0u);
  EXPECT_GT(source_->fences, fences) << "freed memory unmapped without the fence";
  check();
}

TEST_F(CarvedRangeTest, GrowthFillsAHoleWithTheFreeSpaceAroundIt) {
  std::vector<CUdeviceptr> full;
  for (int i = 0; i < 4; ++i) full.push_back(carve(kExtent, 1 + i));
  uncarve(full[1]);
  ASSERT_EQ(range_->release_idle(1), 1u);  // slot 1 unmapped: a hole
  uncarve(full[0]);                         // free space before the hole
  // 48 MiB: the 32 MiB before the hole and half of the hole's slot; mapping one slot there beats
  // mapping two at the end.
  const CUdeviceptr p = carve(48 * kMiB, 7);
  EXPECT_EQ(p, base_);
  EXPECT_EQ(range_->figures().slots_mapped, 4u);
  check();
}

TEST_F(CarvedRangeTest, AFreeOfAnythingButALiveAllocationsStartIsRefusedAndChangesNothing) {
  const CUdeviceptr p = carve(3 * kMiB, 1);
  carve(1 * kMiB, 2);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, range_->free(p + 4096)) << "an interior pointer";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, range_->free(base_ + 100 * kMiB)) << "never allocated";
  ASSERT_TRUE(range_->find(p + 4096).has_value());
  EXPECT_EQ(range_->find(p + 4096)->start, p);
  EXPECT_EQ(range_->find(p + 3 * kMiB - 1)->bytes, 3 * kMiB);
  uncarve(p);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, range_->free(p)) << "a double free";
  EXPECT_FALSE(range_->find(p).has_value());
  check();
}

TEST_F(CarvedRangeTest, ReleaseIdleGivesBackOnlyWhollyFreeSlotsHighestFirst) {
  const CUdeviceptr a = carve(kExtent, 1), b = carve(kExtent, 2), c = carve(kExtent + kMiB, 3);
  uncarve(a);
  uncarve(b);
  sim().reset_counts();
  EXPECT_EQ(range_->release_idle(8), 2u) << "slots 0 and 1; slot 3 holds the tail of c";
  EXPECT_EQ(sim().call_count("cuMemUnmap"), 2u);
  EXPECT_EQ(source_->spare(), 2u);
  EXPECT_EQ(range_->figures().slots_mapped, 2u);
  (void)c;
  check();
}

TEST_F(CarvedRangeTest, OutOfMemoryLosesNothing) {
  source_->limit = 2;
  carve(40 * kMiB, 1);
  CUdeviceptr p = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, range_->allocate(40 * kMiB, &p)) << "two extents are all there is";
  EXPECT_EQ(source_->spare(), 0u);
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, range_->allocate(kSlots * kExtent + 1, &p)) << "larger than the range";
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, range_->allocate(0, &p));
  EXPECT_EQ(carve(24 * kMiB, 2), base_ + 40 * kMiB) << "what is mapped still serves";
  check();
}

TEST_F(CarvedRangeTest, AFailingMapGivesEverythingBackAndTheRangeStaysUsable) {
  carve(kExtent, 1);
  for (unsigned n = 1; n <= 3; ++n) {
    SCOPED_TRACE("cuMemMap failing at its call " + std::to_string(n));
    ASSERT_EQ(sim().fail("cuMemMap", n, CUDA_ERROR_UNKNOWN), 0);
    CUdeviceptr p = 0;
    EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, range_->allocate(3 * kExtent, &p));
    sim().clear_failures();
    EXPECT_EQ(range_->figures().slots_mapped, 1u);
    EXPECT_EQ(source_->spare(), 3u) << "extents taken for the growth were not given back";
    check();
  }
  EXPECT_EQ(carve(3 * kExtent, 2), base_ + kExtent);
  check();
}

// An idle slot mapped in pieces whose unmap the driver refuses for one piece (twice: Vmm::unmap asks
// again) is mapped back whole: it stays, free, where it was, and what is carved there next holds its
// bytes. Before, the other pieces stayed unmapped and the slot's free space was handed out.
TEST_F(CarvedRangeTest, AnIdleSlotWhoseUnmapFailsForOnePieceIsMappedWholeAgain) {
  source_->split = true;
  const CUdeviceptr p = carve(4 * kMiB, 1);
  ASSERT_EQ(range_->slot_pieces(0).size(), kExtent / gran);
  uncarve(p);
  ASSERT_EQ(sim().fail("cuMemUnmap", 2, CUDA_ERROR_UNKNOWN), 0);  // the second piece, and the retry
  ASSERT_EQ(sim().fail("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN), 0);
  EXPECT_EQ(range_->release_idle(1), 0u);
  sim().clear_failures();
  EXPECT_EQ(range_->figures().slots_mapped, 1u);
  EXPECT_EQ(range_->figures().retired, 0u);
  check();
  EXPECT_EQ(carve(kExtent, 2), base_) << "the slot's free space, mapped whole";
  check();  // the data of every allocation, read back
  uncarve(base_);
  EXPECT_EQ(range_->release_idle(1), 1u) << "given back once the driver unmaps it";
}

// Where mapping back fails too, the slot is partly mapped: retired for good, nothing placed in it,
// never idle, its pieces given back with the range.
TEST_F(CarvedRangeTest, AnIdleSlotLeftPartlyMappedIsRetiredAndNothingIsPlacedInIt) {
  source_->split = true;
  uncarve(carve(4 * kMiB, 1));
  ASSERT_EQ(sim().fail("cuMemUnmap", 2, CUDA_ERROR_UNKNOWN), 0);
  ASSERT_EQ(sim().fail("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN), 0);
  ASSERT_EQ(sim().fail("cuMemMap", 1, CUDA_ERROR_UNKNOWN), 0);  // mapping the first piece back
  EXPECT_EQ(range_->release_idle(1), 0u);
  sim().clear_failures();
  EXPECT_EQ(range_->figures().retired, 1u);
  EXPECT_EQ(range_->figures().slots_idle, 0u) << "a retired slot is not idle memory";
  EXPECT_EQ(range_->release_idle(1), 0u) << "nor given back";
  check();
  const CUdeviceptr q = carve(kExtent, 2);
  EXPECT_GE(q, base_ + kExtent) << "placed in the retired slot";
  const CUdeviceptr r = carve(4 * kMiB, 3);
  EXPECT_GE(r, base_ + kExtent) << "placed in the retired slot";
  check();
}

TEST_F(CarvedRangeTest, RandomAllocationsAndFreesKeepTheirBytes) {
  std::mt19937_64 rng(7);
  std::vector<CUdeviceptr> live;
  for (int step = 0; step < 400; ++step) {
    if (!live.empty() && (rng() % 5 < 2 || live.size() > 40)) {
      const std::size_t i = rng() % live.size();
      uncarve(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const std::size_t bytes = 1 + rng() % (rng() % 4 == 0 ? 48 * kMiB : 4 * kMiB);
      CUdeviceptr p = 0;
      if (range_->allocate(bytes, &p) == CUDA_SUCCESS) {
        fill(p, bytes, 100 + step);
        blocks_[p] = Block{p, bytes, 100u + step};
        live.push_back(p);
      }
    }
    if (step % 25 == 0) range_->release_idle(1);
    if (step % 50 == 0) check();
  }
  std::vector<Block> all;
  for (const auto& [p, b] : blocks_) all.push_back(b);
  EXPECT_TRUE(disjoint(all));
  check();
}

}  // namespace
}  // namespace pooltest
