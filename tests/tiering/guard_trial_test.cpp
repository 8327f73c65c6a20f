// The thrash guard's trial (src/tiering/guard_trial.h) on made-up period times: it begins when the
// guard keeps something in place, times the guard on then off (the transition period not counted),
// keeps the faster by the margin, gives up without a clock, starts over when the decided setting's
// time drifts, and does nothing when the setting is fixed.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "tiering/guard_trial.h"

namespace {

using uvmpool::tiering::GuardSetting;
using uvmpool::tiering::GuardTrial;
using uvmpool::tiering::GuardTrialConfig;

// Drives a trial: each period's time comes from `time(on)` (the setting it ran with) and is answered
// `delay` periods later, as events are.
class Driver {
 public:
  Driver(GuardTrial& trial, std::function<std::uint64_t(bool)> time, std::uint64_t delay = 2)
      : trial_(trial), time_(std::move(time)), delay_(delay) {}

  // `count` more periods; `kept`: whether the guard kept something in place in each (when on).
  void run(int count, bool kept = true, bool clock = true) {
    for (int i = 0; i < count; ++i) {
      const std::uint64_t n = ++n_;
      std::optional<GuardTrial::Time> answer;
      if (clock && n > delay_) {
        const std::uint64_t m = n - delay_;
        answer = GuardTrial::Time{m, time_(on_[m % kRing])};
      }
      const bool kept_last = kept && n > 1 && on_[(n - 1) % kRing];
      trial_.period_started(n, answer, kept_last);
      on_[n % kRing] = trial_.on();  // the setting period n runs with
    }
  }
  std::uint64_t periods() const { return n_; }

 private:
  static constexpr std::size_t kRing = 64;
  GuardTrial& trial_;
  std::function<std::uint64_t(bool)> time_;
  std::uint64_t delay_;
  std::uint64_t n_ = 0;
  bool on_[kRing] = {};
};

TEST(GuardTrial_, TurnsTheGuardOffWhenThatMakesThePeriodFaster) {
  // A GEMM's weights read in place: the period takes 10x longer with the guard on.
  GuardTrial trial;
  ASSERT_TRUE(trial.on());
  Driver d(trial, [](bool on) { return on ? 1000000u : 100000u; });
  d.run(20);
  EXPECT_FALSE(trial.on());
  EXPECT_EQ(trial.stats().trials, 1u);
  EXPECT_EQ(trial.stats().off, 1u);
  EXPECT_EQ(trial.stats().on_ns, 1000000u);
  EXPECT_EQ(trial.stats().off_ns, 100000u);
  d.run(50);
  EXPECT_FALSE(trial.on()) << "decided, and the times did not change";
  EXPECT_EQ(trial.stats().trials, 1u);
}

TEST(GuardTrial_, KeepsTheGuardOnUnlessOffWinsByTheMargin) {
  // Reading once a period in place against moving in and out: moving is slower, or no faster than
  // the margin.
  for (const std::uint64_t off_ns : {1500000u, 1000000u, 950000u}) {
    SCOPED_TRACE(off_ns);
    GuardTrial trial;
    Driver d(trial, [&](bool on) { return on ? 1000000u : off_ns; });
    d.run(20);
    EXPECT_TRUE(trial.on());
    EXPECT_EQ(trial.stats().trials, 1u);
    EXPECT_EQ(trial.stats().on_ns, 1000000u);
    EXPECT_EQ(trial.stats().off_ns, off_ns) << "timed off too";
  }
}

TEST(GuardTrial_, NoTrialUntilTheGuardKeepsSomethingInPlace) {
  GuardTrial trial;
  Driver d(trial, [](bool on) { return on ? 1000000u : 1u; });
  d.run(30, false);
  EXPECT_TRUE(trial.on());
  EXPECT_EQ(trial.stats().trials, 0u);
}

TEST(GuardTrial_, TheFirstPeriodOffIsATransitionAndDoesNotCount) {
  // The period that switches the guard is not its setting's steady state (it moves what the other
  // setting left). Here it alone is fast: counted, it would turn the guard off.
  GuardTrial trial;
  std::uint64_t off_periods = 0;
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (on) return 1000000;
    return ++off_periods == 1 ? 1 : 2000000;  // answered in order: the first off period answered first
  });
  d.run(20);
  EXPECT_TRUE(trial.on());
  EXPECT_EQ(trial.stats().off_ns, 2000000u) << "the transition's time was taken";
}

TEST(GuardTrial_, WithoutAClockTheGuardStaysOn) {
  GuardTrial trial;
  Driver d(trial, [](bool) { return 0u; });
  d.run(40, true, false);
  EXPECT_TRUE(trial.on());
  EXPECT_EQ(trial.stats().trials, 1u) << "one trial, given up";
  EXPECT_EQ(trial.stats().on_ns, 0u);
  d.run(40, true, false);
  EXPECT_EQ(trial.stats().trials, 1u) << "not tried again until the period changes";
  trial.reset();
  EXPECT_TRUE(trial.on());
  d.run(2, true, false);
  EXPECT_EQ(trial.stats().trials, 2u);
}

TEST(GuardTrial_, ADecidedSettingWhoseTimeDriftsIsTriedAgain) {
  // Off won; then the batch shrank and in place got cheap: the off period's time grew 3x.
  bool small_batch = false;
  GuardTrial trial;
  Driver d(trial, [&](bool on) -> std::uint64_t {
    if (small_batch) return on ? 100000 : 300000;
    return on ? 1000000 : 100000;
  });
  d.run(20);
  ASSERT_FALSE(trial.on());
  small_batch = true;
  d.run(30);
  EXPECT_EQ(trial.stats().trials, 2u);
  EXPECT_TRUE(trial.on()) << "the second trial found the guard faster";
  EXPECT_EQ(trial.stats().on_ns, 100000u);
  EXPECT_EQ(trial.stats().off_ns, 300000u);
}

TEST(GuardTrial_, AFixedSettingIsNeverTried) {
  for (const GuardSetting setting : {GuardSetting::On, GuardSetting::Off}) {
    GuardTrialConfig config;
    config.setting = setting;
    GuardTrial trial(config);
    Driver d(trial, [](bool on) { return on ? 1000000u : 1000u; });
    d.run(30);
    EXPECT_EQ(trial.on(), setting == GuardSetting::On);
    EXPECT_EQ(trial.stats().trials, 0u);
    EXPECT_EQ(trial.stats().off, setting == GuardSetting::Off ? 1u : 0u);
  }
}

}  // namespace
