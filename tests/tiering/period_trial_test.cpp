// The period trial (src/tiering/period_trial.h) on made-up period times, as the thrash guard's (first
// way: the guard on): it begins when the second way could matter (the guard kept something in
// place), times the guard on then off (the transition period not counted), keeps the faster by the
// margin, gives up without a clock, starts over when the decided setting's time drifts unless
// rebased, and does nothing when the setting is fixed.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "tiering/period_trial.h"

namespace {

using uvmpool::tiering::TrialSetting;
using uvmpool::tiering::PeriodTrial;
using uvmpool::tiering::PeriodTrialConfig;

// Drives a trial: each period's time comes from `time(on)` (the setting it ran with) and is answered
// `delay` periods later, as events are.
class Driver {
 public:
  Driver(PeriodTrial& trial, std::function<std::uint64_t(bool)> time, std::uint64_t delay = 2)
      : trial_(trial), time_(std::move(time)), delay_(delay) {}

  // `count` more periods; `kept`: whether the guard kept something in place in each (when on).
  void run(int count, bool kept = true, bool clock = true) {
    for (int i = 0; i < count; ++i) {
      const std::uint64_t n = ++n_;
      std::optional<PeriodTrial::Time> answer;
      if (clock && n > delay_) {
        const std::uint64_t m = n - delay_;
        answer = PeriodTrial::Time{m, time_(on_[m % kRing])};
      }
      const bool kept_last = kept && n > 1 && on_[(n - 1) % kRing];
      trial_.period_started(n, answer, kept_last);
      on_[n % kRing] = trial_.first();  // the setting period n runs with
    }
  }
  std::uint64_t periods() const { return n_; }

 private:
  static constexpr std::size_t kRing = 64;
  PeriodTrial& trial_;
  std::function<std::uint64_t(bool)> time_;
  std::uint64_t delay_;
  std::uint64_t n_ = 0;
  bool on_[kRing] = {};
};

TEST(PeriodTrial_, TurnsTheGuardOffWhenThatMakesThePeriodFaster) {
  // A GEMM's weights read in place: the period takes 10x longer with the guard on.
  PeriodTrial trial;
  ASSERT_TRUE(trial.first());
  Driver d(trial, [](bool on) { return on ? 1000000u : 100000u; });
  d.run(20);
  EXPECT_FALSE(trial.first());
  EXPECT_EQ(trial.stats().trials, 1u);
  EXPECT_EQ(trial.stats().second, 1u);
  EXPECT_EQ(trial.stats().first_ns, 1000000u);
  EXPECT_EQ(trial.stats().second_ns, 100000u);
  d.run(50);
  EXPECT_FALSE(trial.first()) << "decided, and the times did not change";
  EXPECT_EQ(trial.stats().trials, 1u);
}

TEST(PeriodTrial_, KeepsTheGuardOnUnlessOffWinsByTheMargin) {
  // Reading once a period in place against moving in and out: moving is slower, or no faster than
  // the margin.
  for (const std::uint64_t off_ns : {1500000u, 1000000u, 950000u}) {
    SCOPED_TRACE(off_ns);
    PeriodTrial trial;
    Driver d(trial, [&](bool on) { return on ? 1000000u : off_ns; });
    d.run(20);
    EXPECT_TRUE(trial.first());
    EXPECT_EQ(trial.stats().trials, 1u);
    EXPECT_EQ(trial.stats().first_ns, 1000000u);
    EXPECT_EQ(trial.stats().second_ns, off_ns) << "timed off too";
  }
}

TEST(PeriodTrial_, OffWinsOnlyWhenItsSlowestPeriodBeatsOnsFastest) {
  // Periods that vary by a fifth on their own (a shared GPU, a busy host): one lucky off period 15%
  // faster than on is no win. Off's other sample is slower than on.
  PeriodTrial trial;
  std::uint64_t off_periods = 0;
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (on) return 1000000;
    return ++off_periods % 2 == 0 ? 850000 : 1200000;
  });
  d.run(20);
  EXPECT_TRUE(trial.first());
  EXPECT_EQ(trial.stats().trials, 1u);
  EXPECT_EQ(trial.stats().second_ns, 850000u) << "the least of off's samples, as the log says";
}

TEST(PeriodTrial_, DriftsThatTrialsDoNotBearOutAreWatchedLessAndLess) {
  // The guard's time alternates between 1 ms and 2 ms every two periods (noise, not a change): each
  // run of two slow periods is a drift, and each trial finds the guard still faster than off. Were
  // every drift tried, a trial would begin every few periods, each with periods off.
  struct Run {
    std::uint64_t trials, off_periods;
  };
  const auto run = [](std::uint32_t backoff) {
    PeriodTrialConfig config;
    config.backoff = backoff;
    PeriodTrial trial(config);
    std::uint64_t answered = 0;
    std::uint64_t off_periods = 0;
    Driver d(trial, [&](bool on) -> std::uint64_t {
      const bool slow = ++answered / 2 % 2 == 1;
      if (!on) ++off_periods;
      return on ? (slow ? 2000000 : 1000000) : 5000000;
    });
    d.run(400);
    EXPECT_TRUE(trial.first());
    return Run{trial.stats().trials, off_periods};
  };
  const Run backing_off = run(PeriodTrialConfig{}.backoff);
  // 1 + drifts at about 0, 16, 48, 112, 240 periods after the first decision (the watch waits
  // 16, 32, 64, 128 more after each).
  EXPECT_GE(backing_off.trials, 3u) << "a drift is still tried";
  EXPECT_LE(backing_off.trials, 7u);
  const Run every_drift = run(0);
  EXPECT_GE(every_drift.trials, 30u);
  EXPECT_LE(backing_off.off_periods * 5, every_drift.off_periods)
      << backing_off.off_periods << " periods off against " << every_drift.off_periods;
}

TEST(PeriodTrial_, NoTrialUntilTheGuardKeepsSomethingInPlace) {
  PeriodTrial trial;
  Driver d(trial, [](bool on) { return on ? 1000000u : 1u; });
  d.run(30, false);
  EXPECT_TRUE(trial.first());
  EXPECT_EQ(trial.stats().trials, 0u);
}

TEST(PeriodTrial_, TheFirstPeriodOffIsATransitionAndDoesNotCount) {
  // The period that switches the guard is not its setting's steady state (it moves what the other
  // setting left). Here it alone is fast: counted, it would turn the guard off.
  PeriodTrial trial;
  std::uint64_t off_periods = 0;
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (on) return 1000000;
    return ++off_periods == 1 ? 1 : 2000000;  // answered in order: the first off period answered first
  });
  d.run(20);
  EXPECT_TRUE(trial.first());
  EXPECT_EQ(trial.stats().second_ns, 2000000u) << "the transition's time was taken";
}

TEST(PeriodTrial_, WithoutAClockTheGuardStaysOn) {
  PeriodTrial trial;
  Driver d(trial, [](bool) { return 0u; });
  d.run(40, true, false);
  EXPECT_TRUE(trial.first());
  EXPECT_EQ(trial.stats().trials, 1u) << "one trial, given up";
  EXPECT_EQ(trial.stats().first_ns, 0u);
  d.run(40, true, false);
  EXPECT_EQ(trial.stats().trials, 1u) << "not tried again until the period changes";
  trial.reset();
  EXPECT_TRUE(trial.first());
  d.run(2, true, false);
  EXPECT_EQ(trial.stats().trials, 2u);
}

TEST(PeriodTrial_, ADecidedSettingWhoseTimeDriftsIsTriedAgain) {
  // Off won; then the batch shrank and in place got cheap: the off period's time grew 3x.
  bool small_batch = false;
  PeriodTrial trial;
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (small_batch) return on ? 100000 : 300000;
    return on ? 1000000 : 100000;
  });
  d.run(20);
  ASSERT_FALSE(trial.first());
  small_batch = true;
  d.run(30);
  EXPECT_EQ(trial.stats().trials, 2u);
  EXPECT_TRUE(trial.first()) << "the second trial found the guard faster";
  EXPECT_EQ(trial.stats().first_ns, 100000u);
  EXPECT_EQ(trial.stats().second_ns, 300000u);
}

TEST(PeriodTrial_, ARebasedDecisionWatchesItsTimeFromTheNextPeriod) {
  // Off won; then the other trial changed the period's time 3x (the epochs moved to the launching
  // thread). Rebased, that is the new reference, not a drift; not rebased, it starts a trial.
  for (const bool rebase : {true, false}) {
    SCOPED_TRACE(rebase);
    std::uint64_t scale = 1;
    PeriodTrial trial;
    Driver d(trial, [&](bool on) -> std::uint64_t { return (on ? 1000000u : 100000u) * scale; });
    d.run(20);
    ASSERT_FALSE(trial.first());
    ASSERT_FALSE(trial.timing());
    scale = 3;
    if (rebase) trial.rebase(d.periods());
    d.run(30);
    EXPECT_EQ(trial.stats().trials, rebase ? 1u : 2u);
    EXPECT_FALSE(trial.first()) << "off wins either way";
  }
}

TEST(PeriodTrial_, ARetryTimesBothWaysAgainFromTheNextPeriod) {
  // Off won; the other trial then changed what the period costs either way (the epochs went to the
  // launching thread, where moves land in time): tried again, on wins now.
  bool epochs_moved = false;
  PeriodTrial trial;
  EXPECT_FALSE(trial.retry(1)) << "nothing decided to try again";
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (epochs_moved) return on ? 100000 : 300000;
    return on ? 1000000 : 100000;
  });
  d.run(20);
  ASSERT_FALSE(trial.first());
  epochs_moved = true;
  ASSERT_TRUE(trial.retry(d.periods()));
  EXPECT_TRUE(trial.timing());
  EXPECT_TRUE(trial.first()) << "the first way first";
  d.run(12);
  EXPECT_FALSE(trial.timing());
  EXPECT_EQ(trial.stats().trials, 2u);
  EXPECT_TRUE(trial.first());
  EXPECT_EQ(trial.stats().first_ns, 100000u);
  EXPECT_EQ(trial.stats().second_ns, 300000u);
}

TEST(PeriodTrial_, AFixedSettingIsNeverTried) {
  for (const TrialSetting setting : {TrialSetting::First, TrialSetting::Second}) {
    PeriodTrialConfig config;
    config.setting = setting;
    PeriodTrial trial(config);
    Driver d(trial, [](bool on) { return on ? 1000000u : 1000u; });
    d.run(30);
    EXPECT_EQ(trial.first(), setting == TrialSetting::First);
    EXPECT_EQ(trial.stats().trials, 0u);
    EXPECT_EQ(trial.stats().second, setting == TrialSetting::Second ? 1u : 0u);
  }
}

}  // namespace
