// RepeatPlaces (src/pool/repeat_places.h) alone: what names a point of the program, and what it
// remembers. The pool's use of it: RepeatedPlacement in stream_order_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "pool/repeat_places.h"

namespace {

using uvmpool::pool::RepeatPlaces;

// The first place remembered for the next allocation of `bytes`, under either name.
CUdeviceptr first(const RepeatPlaces& r, std::size_t bytes) { return r.last_places(bytes)[0]; }

TEST(RepeatPlaces, APointIsTheSizeAndHowManyOfItAreLive) {
  RepeatPlaces r;
  EXPECT_EQ(first(r, 100), 0u) << "nothing remembered yet";
  r.placed(100, 0x1000);  // the first of its size
  r.placed(100, 0x2000);  // the second
  r.placed(300, 0x9000);  // another size: a point of its own
  EXPECT_EQ(first(r, 100), 0u) << "two of the size live: no third was ever placed";
  r.freed(0x1000);
  r.freed(0x2000);
  EXPECT_EQ(first(r, 100), 0x1000u) << "none live: the first's place, whatever order they were freed in";
  r.placed(100, 0x1000);
  EXPECT_EQ(first(r, 100), 0x2000u);
  EXPECT_EQ(first(r, 300), 0u) << "one of that size is live";
  r.freed(0x9000);
  EXPECT_EQ(first(r, 300), 0x9000u);
}

TEST(RepeatPlaces, ANameKeepsItsLatestPlacesMostRecentFirst) {
  RepeatPlaces r;
  // The same name (the first of size 100, after the same sizes) placed at 0x1000, 0x5000, 0x9000 and
  // 0xD000 in turn: it keeps the last kPerName, most recent first.
  static_assert(RepeatPlaces::kPerName == 3);
  for (CUdeviceptr p : {0x1000, 0x5000, 0x9000, 0xD000}) {
    for (int i = 0; i < 3; ++i) r.placed(7, 0x100 + i);  // the same sizes before it every time
    r.placed(100, p);
    r.freed(p);
    for (int i = 0; i < 3; ++i) r.freed(0x100 + i);
  }
  for (int i = 0; i < 3; ++i) r.placed(7, 0x100 + i);
  EXPECT_EQ(r.last_places(100), (RepeatPlaces::Places{0xD000, 0x9000, 0x5000, 0, 0, 0}));
  r.placed(100, 0x5000);  // placed again at one it keeps: first now, the rest in their order
  r.freed(0x5000);
  EXPECT_EQ(r.last_places(100), (RepeatPlaces::Places{0x5000, 0xD000, 0x9000, 0, 0, 0}));
}

TEST(RepeatPlaces, FreesOfAddressesNotPlacedHereChangeNothing) {
  RepeatPlaces r;
  r.placed(100, 0x1000);
  r.freed(0x7000);  // a synchronous allocation's, or a foreign pointer
  r.freed(0x1000);
  r.freed(0x1000);  // a double free
  r.placed(100, 0x3000);
  EXPECT_EQ(first(r, 100), 0u) << "one live, counted once";
  r.placed(100, 0x3000);  // placed twice without a free: counted once
  r.freed(0x3000);
  EXPECT_EQ(first(r, 100), 0x3000u);
}

// A program whose lifetimes do not nest: A, x, B, free A, y, C, then all freed, every round. C finds
// one of its size live, as B did. A pool that places each allocation at the first of its places that
// is free (else somewhere new) gives every allocation the same address round after round once the
// names are learned; by size and depth alone, B and C would trade places every round.
TEST(RepeatPlaces, LifetimesThatDoNotNestKeepTheirPlacesByTheirContext) {
  constexpr std::size_t s = 4096, x = 512, y = 768;
  RepeatPlaces r;
  std::set<CUdeviceptr> live;
  CUdeviceptr fresh = 0x100000;
  const auto place = [&](std::size_t bytes) {
    CUdeviceptr at = 0;
    for (CUdeviceptr want : r.last_places(bytes))
      if (want != 0 && !live.contains(want)) {
        at = want;
        break;
      }
    if (at == 0) at = fresh += 0x10000;
    r.placed(bytes, at);
    live.insert(at);
    return at;
  };
  const auto free = [&](CUdeviceptr p) {
    r.freed(p);
    live.erase(p);
  };
  std::vector<std::vector<CUdeviceptr>> rounds;
  for (int round = 0; round < 5; ++round) {
    const CUdeviceptr a = place(s), px = place(x), b = place(s);
    free(a);
    const CUdeviceptr py = place(y), c = place(s);
    for (CUdeviceptr p : {px, b, py, c}) free(p);
    rounds.push_back({a, px, b, py, c});
  }
  EXPECT_EQ(rounds[3], rounds[2]);
  EXPECT_EQ(rounds[4], rounds[3]);
}

TEST(RepeatPlaces, PastItsCapItForgetsEveryNameAtOnce) {
  RepeatPlaces r;
  // Each allocation is remembered under two names.
  for (std::size_t i = 0; i < RepeatPlaces::kMostPoints / 2; ++i) r.placed(i + 1, 0x1000 * (i + 1));
  EXPECT_EQ(r.points(), RepeatPlaces::kMostPoints);
  r.placed(RepeatPlaces::kMostPoints + 1, 0x1000 * (RepeatPlaces::kMostPoints + 1));
  EXPECT_EQ(r.points(), 2u);
}

TEST(RepeatPlaces, AStartThatOverlapsAnotherSizesPlaceIsOthers) {
  RepeatPlaces r;
  r.placed(0x1000, 0x10000);  // a place of 4 KiB at 0x10000
  r.freed(0x10000);
  EXPECT_TRUE(r.others_place(0xF800, 0x1000, 0x800)) << "reaches into it";
  EXPECT_TRUE(r.others_place(0x10800, 0x100, 0x800)) << "inside it";
  EXPECT_FALSE(r.others_place(0x11000, 0x1000, 0x800)) << "right after it";
  EXPECT_FALSE(r.others_place(0xF000, 0x1000, 0x800)) << "right before it";
  EXPECT_FALSE(r.others_place(0x10000, 0x1000, 0x1000)) << "a place of the same size is not another's";
}

TEST(RepeatPlaces, PlacesAreCappedEvenWhileTheNamesAreFew) {
  RepeatPlaces r;
  // One name, a new address every time: the names stay few, the places would grow without end.
  for (std::size_t i = 0; i <= RepeatPlaces::kMostPoints; ++i) {
    r.placed(100, 0x1000 * (i + 1));
    r.freed(0x1000 * (i + 1));
  }
  EXPECT_FALSE(r.others_place(0x1000, 1, 50)) << "the oldest place was forgotten with the rest at the cap";
  EXPECT_TRUE(r.others_place(0x1000 * (RepeatPlaces::kMostPoints + 1), 1, 50)) << "the newest is kept";
}

}  // namespace
