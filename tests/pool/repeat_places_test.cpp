// RepeatPlaces (src/pool/repeat_places.h) alone: what names a point of the program, and what it
// remembers. The pool's use of it: RepeatedPlacement in stream_order_test.cpp.
#include <gtest/gtest.h>

#include "pool/repeat_places.h"

namespace {

using uvmpool::pool::RepeatPlaces;

TEST(RepeatPlaces, APointIsTheSizeAndHowManyOfItAreLive) {
  RepeatPlaces r;
  EXPECT_EQ(r.last_place(100), 0u) << "nothing remembered yet";
  r.placed(100, 0x1000);  // the first of its size
  r.placed(100, 0x2000);  // the second
  r.placed(300, 0x9000);  // another size: a point of its own
  EXPECT_EQ(r.last_place(100), 0u) << "two of the size live: no third was ever placed";
  r.freed(0x1000);
  r.freed(0x2000);
  EXPECT_EQ(r.last_place(100), 0x1000u) << "none live: the first's place, whatever order they were freed in";
  r.placed(100, 0x1000);
  EXPECT_EQ(r.last_place(100), 0x2000u);
  EXPECT_EQ(r.last_place(300), 0u) << "one of that size is live";
  r.freed(0x9000);
  EXPECT_EQ(r.last_place(300), 0x9000u);
}

TEST(RepeatPlaces, APlaceTakenElsewhereReplacesTheOneRemembered) {
  RepeatPlaces r;
  r.placed(100, 0x1000);
  r.freed(0x1000);
  r.placed(100, 0x5000);  // the pool could not place it at 0x1000
  r.freed(0x5000);
  EXPECT_EQ(r.last_place(100), 0x5000u);
}

TEST(RepeatPlaces, FreesOfAddressesNotPlacedHereChangeNothing) {
  RepeatPlaces r;
  r.placed(100, 0x1000);
  r.freed(0x7000);  // a synchronous allocation's, or a foreign pointer
  r.freed(0x1000);
  r.freed(0x1000);  // a double free
  r.placed(100, 0x3000);
  EXPECT_EQ(r.last_place(100), 0u) << "one live, counted once";
  r.placed(100, 0x3000);  // placed twice without a free: counted once
  r.freed(0x3000);
  EXPECT_EQ(r.last_place(100), 0x3000u);
}

TEST(RepeatPlaces, PastItsCapItForgetsEveryPointAtOnce) {
  RepeatPlaces r;
  for (std::size_t i = 0; i < RepeatPlaces::kMostPoints; ++i) r.placed(i + 1, 0x1000 * (i + 1));
  EXPECT_EQ(r.points(), RepeatPlaces::kMostPoints);
  r.placed(RepeatPlaces::kMostPoints + 1, 0x1000 * (RepeatPlaces::kMostPoints + 1));
  EXPECT_EQ(r.points(), 1u);
}

}  // namespace
