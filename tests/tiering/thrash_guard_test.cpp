// The thrash guard's trial on the simulated driver (src/tiering/period_trial.h, period_clock.h): the
// period clock answers the virtual time between two periods' events once the device has run them,
// records nothing while a capture is under way, and stops on a driver error; a decoding-shaped
// sweep whose kernels read their weights many times (a GEMM at a large batch) turns the guard off and
// runs faster, while one that reads each byte once keeps it on, with every byte kept and the race
// detector at 0 (the fixture checks it).
#include <gtest/gtest.h>

#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/period_clock.h"
#include "tiering/tiering.h"

namespace {

using namespace pooltest;
using uvmpool::tiering::TrialSetting;
using uvmpool::tiering::PeriodTrial;
using uvmpool::tiering::Mode;
using uvmpool::tiering::MoverConfig;
using uvmpool::tiering::PeriodClock;
using uvmpool::tiering::PolicyConfig;
using uvmpool::tiering::Stats;
using uvmpool::tiering::Tiering;

std::uint64_t sim_now() {
  using Now = std::uint64_t (*)();
  static const auto now = reinterpret_cast<Now>(uvmpool::driver::real_symbol("uvmpool_sim_now_ns"));
  return now != nullptr ? now() : 0;
}

class ThrashGuard_ : public LaunchedTest {
 protected:
  // Weights 1.5x the budget, each read by one launch a token `passes` times, for `tokens` tokens
  // through tiering as the launch hooks show them, the mover polled after each launch and the stream
  // synchronized after each token (the sampled token read back). Returns the virtual time of the
  // last 5 tokens, per token.
  std::uint64_t decode(std::uint32_t passes, TrialSetting setting, int tokens) {
    PolicyConfig policy;
    policy.guard.setting = setting;
    MoverConfig mover;
    mover.thread = false;
    tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, mover, policy);
    weights.clear();
    for (int i = 0; i < 12; ++i) {
      weights.push_back(allocate(8 * kMiB));
      if (weights.back() == 0) return 0;
      EXPECT_CU(drv().cuMemsetD32_v2(weights.back(), 0x5000 + i, 8 * kMiB / 4));
    }
    std::uint64_t started = 0;
    for (int t = 0; t < tokens; ++t) {
      if (t == tokens - 5) started = sim_now();
      for (CUdeviceptr w : weights) read_shown(w, 8 * kMiB, passes);
      end_period();
    }
    const std::uint64_t per_token = (sim_now() - started) / 5;
    EXPECT_CU(tiering->mover().run_until_idle());
    for (int i = 0; i < 12; ++i) EXPECT_TRUE(all_equal(weights[i], 8 * kMiB, 0x5000 + i)) << "weight " << i;
    return per_token;
  }
  std::vector<CUdeviceptr> weights;
};

TEST_F(ThrashGuard_, ThePeriodClockAnswersTheDevicesTimeBetweenTwoPeriods) {
  // Six periods queued ahead of the device, the first launch of period n reading 1000 n passes: the
  // device runs them back to back, so period n (from its first launch's end to the next one's) takes
  // what period n + 1's launch takes. Nothing is known before the device has run it.
  const CUdeviceptr p = allocate(8 * kMiB);
  ASSERT_NE(p, 0u);
  PeriodClock clock(drv());
  for (std::uint64_t n = 1; n <= 6; ++n) {
    ASSERT_CU(read(p, 8 * kMiB, static_cast<std::uint32_t>(1000 * n)));
    EXPECT_FALSE(clock.mark(n, stream, false).has_value()) << "period " << n << " answered before the device ran it";
  }
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  std::vector<PeriodTrial::Time> answered;
  for (std::uint64_t n = 7; n <= 12; ++n)
    if (const auto t = clock.mark(n, stream, false)) answered.push_back(*t);
  ASSERT_FALSE(clock.stopped());
  ASSERT_GE(answered.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(answered[i].period, i + 1) << "answered oldest first, each once";
    const double expected = static_cast<double>(answered[0].ns) * static_cast<double>(i + 2) / 2.0;
    EXPECT_NEAR(static_cast<double>(answered[i].ns), expected, expected / 100) << "period " << i + 1;
  }
  EXPECT_GT(answered[0].ns, 1000000u) << "2000 passes over 8 MiB take milliseconds at HBM speed";
}

TEST_F(ThrashGuard_, ThePeriodClockRecordsNothingDuringACaptureAndStopsOnADriverError) {
  PeriodClock clock(drv());
  sim().reset_counts();
  for (std::uint64_t n = 1; n <= 4; ++n) EXPECT_FALSE(clock.mark(n, stream, true).has_value());
  EXPECT_EQ(sim().call_count("cuEventRecord"), 0u) << "an event recorded into a capture";
  ASSERT_EQ(sim().fail("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED), 0);
  EXPECT_FALSE(clock.mark(5, stream, false).has_value());
  EXPECT_TRUE(clock.stopped());
  EXPECT_FALSE(clock.mark(6, stream, false).has_value());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
}

TEST_F(ThrashGuard_, WeightsReadManyTimesAPeriodMoveInAndTheSweepRunsFaster) {
  const std::uint64_t kept = decode(64, TrialSetting::First, 12);
  const Stats on = tiering->stats();
  free_all(weights);
  const std::uint64_t measured = decode(64, TrialSetting::Measure, 20);
  const Stats trial = tiering->stats();
  ASSERT_GT(kept, 0u);
  EXPECT_EQ(on.promoted_bytes, 0u);
  EXPECT_GT(on.kept_in_place, 0u);
  EXPECT_EQ(trial.guard_trials, 1u);
  EXPECT_EQ(trial.guard_off, 1u);
  EXPECT_GT(tiering->policy_stats().guard.first_ns, tiering->policy_stats().guard.second_ns);
  EXPECT_GT(trial.promoted_bytes, 0u);
  EXPECT_LT(measured, kept) << "modeled per token: measured " << measured << " ns, guard on " << kept << " ns";
}

TEST_F(ThrashGuard_, WeightsReadOnceAPeriodStayInPlace) {
  const std::uint64_t kept = decode(1, TrialSetting::First, 12);
  free_all(weights);
  const std::uint64_t measured = decode(1, TrialSetting::Measure, 30);
  const Stats trial = tiering->stats();
  EXPECT_EQ(trial.guard_trials, 1u);
  EXPECT_EQ(trial.guard_off, 0u);
  EXPECT_LT(tiering->policy_stats().guard.first_ns, tiering->policy_stats().guard.second_ns);
  EXPECT_LE(measured, kept + kept / 20) << "modeled per token: measured " << measured << " ns, guard on " << kept << " ns";
}

}  // namespace
