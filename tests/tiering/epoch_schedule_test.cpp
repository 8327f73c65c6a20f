// When the launching thread runs an epoch (src/tiering/epoch_schedule.h): an ask of the learned
// period when it is due, one launch before the last launch that still lands it in time; asks that
// name no launch, and what an epoch left, at the cadence; the earliest due wins.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tiering/epoch_schedule.h"

namespace {

using uvmpool::tiering::EpochSchedule;

// Launches as Tiering::after_launch sees them: each shown to the policy (asks follow, made while it
// is planned for), then, while moves are queued, whether an epoch runs after it. `asks[i]`: the asks
// made while launch i + 1 is planned for; an epoch after a launch in `leaves` leaves requests queued;
// `unseen`: a request is queued before launch 1 that the schedule is not told of. Returns the
// launches (numbered from 1) after which an epoch ran.
std::vector<int> epochs_after(EpochSchedule& s, int launches, const std::vector<std::vector<std::size_t>>& asks,
                              const std::vector<int>& leaves = {}, bool unseen = false) {
  std::vector<int> ran;
  bool queued = unseen;
  for (int i = 0; i < launches; ++i) {
    s.shown();
    if (static_cast<std::size_t>(i) < asks.size()) {
      for (std::size_t needed_in : asks[static_cast<std::size_t>(i)]) {
        s.asked(needed_in);
        queued = true;
      }
    }
    if (queued && s.launched()) {
      ran.push_back(i + 1);
      queued = std::find(leaves.begin(), leaves.end(), i + 1) != leaves.end();
      s.ran(queued);
    }
  }
  return ran;
}

TEST(EpochSchedule_, AnAskOfThePeriodRunsOneLaunchBeforeTheLastThatLandsItInTime) {
  struct Row {
    std::size_t needed_in;  // asked while launch 1 is planned for
    int epoch_after;        // the launch after which the epoch runs
  } rows[] = {
      // Needed by launch 2 (the next): the epoch runs now, after launch 1.
      {0, 1},
      // Needed by launch 3: it could wait for launch 2, but runs after launch 1, one to spare.
      {1, 1},
      // Needed by launch 12: after launch 10 (11 would be the last in time).
      {10, 10},
      {31, 31},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE("needed in " + std::to_string(r.needed_in));
    EpochSchedule s(4);
    EXPECT_EQ(epochs_after(s, 40, {{r.needed_in}}), std::vector<int>{r.epoch_after});
  }
}

TEST(EpochSchedule_, TheEarliestDueAskOfSeveralRunsTheEpochThatCarriesThemAll) {
  EpochSchedule s(4);
  // Asked at launch 1 for launch 22, at launch 3 for launch 10 (due after 8), at launch 5 for 30.
  // One epoch, after launch 8, takes the queue: no later one until a new ask.
  EXPECT_EQ(epochs_after(s, 40, {{20}, {}, {6}, {}, {24}}), std::vector<int>{8});
}

TEST(EpochSchedule_, AsksWithoutALaunchGoAtTheCadence) {
  EpochSchedule s(4);
  // A prefetch asked at launch 1, nothing else: the epoch runs at once (the cadence counts from the
  // first launch that finds moves queued, as it did for every ask before).
  EXPECT_EQ(epochs_after(s, 10, {{EpochSchedule::kNoLaunch}}), std::vector<int>{1});
  // An epoch that leaves requests queued: the rest at the cadence (4 launches later), not at each
  // launch, and not forgotten either.
  EpochSchedule t(4);
  EXPECT_EQ(epochs_after(t, 12, {{5}}, {5}), (std::vector<int>{5, 9}));
  // Also while an ask made after that epoch waits for its own due launch (after 21): what was left
  // goes at the cadence (9), and that epoch carries the later ask too.
  EpochSchedule w(4);
  EXPECT_EQ(epochs_after(w, 24, {{5}, {}, {}, {}, {}, {16}}, {5}), (std::vector<int>{5, 9}));
  // A request queued that the schedule was not told of: at the cadence too, not never.
  EpochSchedule u(4);
  EXPECT_EQ(epochs_after(u, 12, {}, {1}, /*unseen=*/true), (std::vector<int>{1, 5}));
  // After it, a dated ask runs when it is due (launch 2 + 9 - 1), not at the cadence (launch 5, 9).
  EpochSchedule v(4);
  EXPECT_EQ(epochs_after(v, 12, {{}, {9}}, {}, /*unseen=*/true), (std::vector<int>{1, 10}));
}

TEST(EpochSchedule_, ADueAskIsNotPutOffByTheCadence) {
  EpochSchedule s(8);
  // An undated ask at launch 1 ran at once; a dated one at launch 2 due after launch 4 runs there,
  // between two cadence points.
  EXPECT_EQ(epochs_after(s, 8, {{EpochSchedule::kNoLaunch}, {3}}), (std::vector<int>{1, 4}));
}

}  // namespace
