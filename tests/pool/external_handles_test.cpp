// ExternalHandles (src/pool/external_handles.h): a counted handle's memory ends when its last
// reference is released and its last mapping unmapped, in either order, as the driver frees it.
#include <gtest/gtest.h>

#include "pool/external_handles.h"

namespace {

using uvmpool::pool::ExternalHandles;
using uvmpool::pool::Tier;

constexpr std::size_t kMiB = std::size_t{1} << 20;

ExternalHandles::Counted counted(std::size_t bytes, Tier tier = Tier::Host) { return {0, bytes, tier, {}}; }

// cuMemRelease as the hook tells it: the memory named before the driver's release, released after.
std::optional<ExternalHandles::Counted> release(ExternalHandles& t, uvmpool::pool::Handle h) {
  return t.released(t.releasing(h));
}

TEST(ExternalHandles, ReleasedUnmappedEndsAtOnce) {
  ExternalHandles t;
  EXPECT_FALSE(t.created(7, counted(8 * kMiB)).has_value());
  const auto ended = release(t, 7);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->bytes, 8 * kMiB);
  EXPECT_EQ(ended->tier, Tier::Host);
  EXPECT_EQ(t.live(), 0u);
  EXPECT_FALSE(release(t, 7).has_value()) << "a second release of an ended handle counts nothing";
}

// NCCL's free of a buffer: retain the handle under the address, release it, unmap, release again.
TEST(ExternalHandles, ARetainedHandleEndsAtItsLastRelease) {
  ExternalHandles t;
  t.created(7, counted(8 * kMiB));
  t.mapped(0x1000000, 8 * kMiB, 7);
  t.retained(7, 0x1000000 + kMiB);  // any address inside the mapping
  EXPECT_FALSE(release(t, 7).has_value());
  EXPECT_TRUE(t.unmapped(0x1000000, 8 * kMiB).empty());
  EXPECT_TRUE(t.find(7).has_value()) << "one reference left";
  const auto ended = release(t, 7);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->bytes, 8 * kMiB);
  EXPECT_EQ(t.live(), 0u);
}

TEST(ExternalHandles, AHandleReleasedWhileMappedEndsAtItsUnmap) {
  ExternalHandles t;
  t.created(7, counted(8 * kMiB, Tier::Device));
  t.mapped(0x1000000, 8 * kMiB, 7);
  EXPECT_FALSE(release(t, 7).has_value());
  EXPECT_FALSE(t.find(7).has_value()) << "no reference: the handle's value is the driver's to give again";
  const auto ended = t.unmapped(0x1000000, 8 * kMiB);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].tier, Tier::Device);
  EXPECT_EQ(t.live(), 0u);
  EXPECT_EQ(t.mappings(), 0u);
}

// Mapped twice, one unmap covering both mappings and another handle's between them.
TEST(ExternalHandles, AnUnmapOfSeveralMappingsEndsEachMemoryOnce) {
  ExternalHandles t;
  t.created(7, counted(4 * kMiB));
  t.created(8, counted(2 * kMiB));
  t.mapped(0x1000000, 4 * kMiB, 7);
  t.mapped(0x1400000, 2 * kMiB, 8);
  t.mapped(0x2000000, 4 * kMiB, 7);
  EXPECT_FALSE(release(t, 7).has_value());
  EXPECT_FALSE(release(t, 8).has_value());
  auto ended = t.unmapped(0x1000000, 6 * kMiB);  // 7's first mapping and 8's
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].bytes, 2 * kMiB);
  ended = t.unmapped(0x2000000, 4 * kMiB);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].bytes, 4 * kMiB);
  EXPECT_EQ(t.live(), 0u);
}

// The driver may give a released handle's value to a new handle while the old memory is still mapped:
// the two stay apart, and a handle retained for the old memory by its address (another value: 7 is
// the new handle's) is a reference to the old memory.
TEST(ExternalHandles, AValueGivenAgainNamesTheNewHandleAndTheOldMemoryKeepsItsMappings) {
  ExternalHandles t;
  t.created(7, counted(4 * kMiB));
  t.mapped(0x1000000, 4 * kMiB, 7);
  EXPECT_FALSE(release(t, 7).has_value());
  EXPECT_FALSE(t.created(7, counted(2 * kMiB)).has_value());
  EXPECT_EQ(t.find(7)->bytes, 2 * kMiB);
  t.retained(11, 0x1000000);
  EXPECT_TRUE(t.unmapped(0x1000000, 4 * kMiB).empty()) << "the old memory has a reference again";
  auto ended = release(t, 11);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->bytes, 4 * kMiB);
  ended = release(t, 7);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->bytes, 2 * kMiB);
  EXPECT_EQ(t.live(), 0u);
}

// One thread's last cuMemRelease of 7, and another thread's cuMemCreate that the driver gives the
// value 7 between that release and the table hearing of it: each memory is given back once, the new
// handle's stays counted.
TEST(ExternalHandles, AValueGivenAgainBeforeItsReleaseIsToldKeepsEachCountApart) {
  ExternalHandles t;
  t.created(7, counted(4 * kMiB));
  const std::uint64_t memory = t.releasing(7);  // the releasing thread, before the driver's release
  ASSERT_NE(memory, 0u);
  const auto stale = t.created(7, counted(2 * kMiB));  // the creating thread, after it
  ASSERT_TRUE(stale.has_value()) << "the released memory ends when its value names another";
  EXPECT_EQ(stale->bytes, 4 * kMiB);
  EXPECT_FALSE(t.released(memory).has_value()) << "ended already: not given back twice";
  ASSERT_TRUE(t.find(7).has_value());
  EXPECT_EQ(t.find(7)->bytes, 2 * kMiB) << "the old handle's release was taken from the new one";
  const auto ended = release(t, 7);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->bytes, 2 * kMiB);
  EXPECT_EQ(t.live(), 0u);
}

TEST(ExternalHandles, HandlesAndMappingsNotCountedPassBy) {
  ExternalHandles t;
  t.retained(9, 0x1000000);
  EXPECT_FALSE(t.mapped(0x1000000, 2 * kMiB, 9).has_value());
  EXPECT_TRUE(t.unmapped(0x1000000, 2 * kMiB).empty());
  EXPECT_FALSE(release(t, 9).has_value());
  EXPECT_EQ(t.live(), 0u);
  EXPECT_EQ(t.mappings(), 0u);
}

}  // namespace
