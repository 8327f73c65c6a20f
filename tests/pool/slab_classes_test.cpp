// SlabClasses (src/pool/slab_classes.h), the size classes' lists of slabs, driven on its own with
// slabs made here (no driver: a slab is only its descriptor to the part): slots taken lowest first
// until the slab leaves its list, a freed slot puts it back, a second empty slab of a class is handed
// back dead while the first stays, a move's claim takes a slab off its list and its end puts it
// back, take_empty gathers the empty ones, and the cached figure follows the empty listed slabs on
// the device (not those in host memory).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pool/device_pool.h"
#include "pool/slab_classes.h"

namespace {

using uvmpool::pool::DeviceFigures;
using uvmpool::pool::DeviceStats;
using uvmpool::pool::kDead;
using uvmpool::pool::kLive;
using uvmpool::MutexLock;
using uvmpool::pool::Slab;
using uvmpool::pool::SlabClasses;
using uvmpool::pool::Tier;

class SlabClasses_ : public ::testing::Test {
 protected:
  // A live, empty slab of class `cls` with `slots` slots, its chunk in `tier`.
  Slab* slab(int cls, std::uint32_t slots, Tier tier = Tier::Device) {
    auto s = std::make_unique<Slab>();
    s->base = 0x100000 * (made.size() + 1);
    s->chunk.tier = tier;
    s->cls = cls;
    s->slot_size = 256;
    s->slots = slots;
    s->live.assign((slots + 63) / 64, 0);
    if (slots % 64 != 0) s->live.back() = ~std::uint64_t{0} << (slots % 64);
    s->info.assign(slots, {});
    s->state.store(kLive);
    made.push_back(std::move(s));
    return made.back().get();
  }
  std::uint64_t cached() const { return fig.chunks_cached.load(); }

  DeviceFigures fig;
  SlabClasses classes{fig};
  std::vector<std::unique_ptr<Slab>> made;
};

TEST_F(SlabClasses_, SlotsAreTakenUntilTheSlabIsFullAndAFreedOneListsItAgain) {
  SlabClasses::Class& c = classes.of(3);
  MutexLock lock(c.mu);
  Slab* s = slab(3, 70);
  classes.add(c, s);
  EXPECT_EQ(c.empty, 1u);
  EXPECT_EQ(cached(), 1u);
  for (std::uint32_t i = 0; i < 70; ++i) {
    Slab* got = nullptr;
    std::uint32_t slot = 0;
    ASSERT_TRUE(classes.take_slot(c, &got, &slot));
    EXPECT_EQ(got, s);
    EXPECT_EQ(slot, i);
  }
  EXPECT_EQ(c.empty, 0u);
  EXPECT_EQ(cached(), 0u);
  EXPECT_FALSE(s->listed);
  Slab* got = nullptr;
  std::uint32_t slot = 0;
  EXPECT_FALSE(classes.take_slot(c, &got, &slot)) << "a full slab stays off the list";
  EXPECT_FALSE(classes.free_slot(c, s, 65));
  EXPECT_TRUE(s->listed);
  ASSERT_TRUE(classes.take_slot(c, &got, &slot));
  EXPECT_EQ(slot, 65u) << "the freed slot";
}

TEST_F(SlabClasses_, ASecondEmptySlabOfAClassIsHandedBackDead) {
  SlabClasses::Class& c = classes.of(5);
  MutexLock lock(c.mu);
  Slab* a = slab(5, 4);
  Slab* b = slab(5, 4);
  classes.add(c, a);
  classes.add(c, b);
  Slab* got = nullptr;
  std::uint32_t slot = 0;
  ASSERT_TRUE(classes.take_slot(c, &got, &slot));  // from b, listed last: the head
  ASSERT_EQ(got, b);
  EXPECT_EQ(c.empty, 1u);
  EXPECT_TRUE(classes.free_slot(c, b, slot)) << "a is empty already";
  EXPECT_EQ(b->state.load(), kDead);
  EXPECT_FALSE(b->listed);
  EXPECT_EQ(c.empty, 1u);
  EXPECT_EQ(cached(), 1u) << "a alone";
}

TEST_F(SlabClasses_, AMovesClaimTakesTheSlabOffItsListAndItsEndPutsItBack) {
  SlabClasses::Class& c = classes.of(1);
  MutexLock lock(c.mu);
  Slab* s = slab(1, 4);
  classes.add(c, s);
  classes.claim(c, s);
  EXPECT_TRUE(s->moving.load());
  EXPECT_FALSE(s->listed);
  EXPECT_EQ(c.empty, 0u);
  EXPECT_EQ(cached(), 0u);
  Slab* got = nullptr;
  std::uint32_t slot = 0;
  EXPECT_FALSE(classes.take_slot(c, &got, &slot)) << "no slot of a moving slab";
  s->chunk.tier = Tier::Host;  // the move took it to host memory
  classes.unclaim(c, s);
  EXPECT_FALSE(s->moving.load());
  EXPECT_TRUE(s->listed);
  EXPECT_EQ(c.empty, 1u);
  EXPECT_EQ(cached(), 0u) << "an empty slab in host memory is no cached device memory";
}

TEST_F(SlabClasses_, TakeEmptyGathersTheEmptySlabsOfEveryClassAndCountsAdd) {
  Slab* used = slab(2, 4);
  Slab* empty2 = slab(2, 4);
  Slab* empty7 = slab(7, 4);
  {
    SlabClasses::Class& c = classes.of(2);
    MutexLock lock(c.mu);
    classes.add(c, used);
    Slab* got = nullptr;
    std::uint32_t slot = 0;
    ASSERT_TRUE(classes.take_slot(c, &got, &slot));
    ASSERT_EQ(got, used);
    classes.add(c, empty2);
    c.allocations.store(5);
    c.frees.store(2);
  }
  {
    SlabClasses::Class& c = classes.of(7);
    MutexLock lock(c.mu);
    classes.add(c, empty7);
  }
  EXPECT_EQ(cached(), 2u);
  const std::vector<Slab*> gone = classes.take_empty();
  EXPECT_EQ(gone.size(), 2u);
  EXPECT_EQ(empty2->state.load(), kDead);
  EXPECT_EQ(empty7->state.load(), kDead);
  EXPECT_EQ(used->state.load(), kLive);
  EXPECT_TRUE(used->listed);
  EXPECT_EQ(cached(), 0u);
  DeviceStats stats{};
  classes.add_counts(stats);
  EXPECT_EQ(stats.frees, 2u);
}

}  // namespace
