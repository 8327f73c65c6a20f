// The epochs' trial on the simulated driver (UVMPOOL_TIERING_EPOCHS=measure; src/tiering/period_trial.h):
// with holds ahead, as by default, a sweep that moves memory every period times the period with the
// epochs on the mover's thread and then on the launching thread, keeps one, and the mover follows the
// policy's answer at run time; every move lands with its bytes, and the race detector stays at 0 (the
// fixture checks it). The mover's thread's rounds are made on the test's thread between launches
// while the thread has the epochs (as uvmpool-bench-tiering does): a thread of its own sees the
// simulated device advance only through its own calls (docs/simulator.md), and here ran too few
// moves to time. Mover_.TheEpochsGoToTheLaunchingThreadAndBackWithoutLosingAMove hands a real
// thread's epochs over and back.
#include <gtest/gtest.h>

#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/tiering.h"

namespace {

using namespace pooltest;
using uvmpool::tiering::LaunchSeen;
using uvmpool::tiering::Mode;
using uvmpool::tiering::MoverConfig;
using uvmpool::tiering::PolicyConfig;
using uvmpool::tiering::Stats;
using uvmpool::tiering::Tiering;
using uvmpool::tiering::TrialSetting;

class EpochsTrial_ : public LaunchedTest {};

TEST_F(EpochsTrial_, TheMoverRunsItsEpochsWhereThePolicysTrialSaysAndLosesNothing) {
  PolicyConfig policy;
  policy.guard.setting = TrialSetting::Second;  // the guard off: weights move in every period
  policy.epochs.setting = TrialSetting::Measure;
  MoverConfig mover;
  mover.thread = false;  // its thread's rounds made here between launches, as the benchmarks do (see the top)
  mover.holds_ahead = 8;
  mover.launches_per_epoch = 4;
  tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, mover, policy);
  std::vector<CUdeviceptr> weights;
  for (int i = 0; i < 12; ++i) {  // 96 MiB for a device budget of about 64
    weights.push_back(allocate(8 * kMiB));
    ASSERT_NE(weights.back(), 0u);
    ASSERT_CU(drv().cuMemsetD32_v2(weights.back(), 0x7000 + i, 8 * kMiB / 4));
  }
  bool followed = true, ran_on_launch = false;
  for (int t = 0; t < 40; ++t) {
    for (CUdeviceptr w : weights) {
      std::uint64_t bytes = 8 * kMiB;
      std::uint32_t passes = 2, write = 0;
      void* params[] = {&w, &bytes, &passes, &write};
      LaunchSeen seen;
      tiering->before_launch(touch, stream, params, nullptr, &seen);
      ASSERT_CU(drv().cuLaunchKernel(touch, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
      const std::uint64_t epochs = tiering->mover().stats().epochs;
      tiering->after_launch(seen, stream);  // polls the mover while the launching thread has the epochs
      if (tiering->mover().on_launch() && tiering->mover().stats().epochs != epochs) ran_on_launch = true;
      if (!tiering->mover().on_launch()) {  // the mover's thread's round (Mover::pipeline_step)
        while (tiering->mover().standing_holds() > 0 && tiering->mover().complete_placed(false) == CUDA_SUCCESS) {
        }
        tiering->mover().place_epoch();
      }
      followed = followed && tiering->mover().on_launch() == tiering->policy_stats().epochs.second;
    }
    end_period();
  }
  const Stats s = tiering->stats();
  EXPECT_TRUE(followed) << "the mover's thread choice differed from the policy's answer";
  EXPECT_GE(s.epochs_trials, 1u);
  EXPECT_NE(tiering->policy_stats().epochs.first_ns, 0u) << "timed on the mover's thread";
  EXPECT_NE(tiering->policy_stats().epochs.second_ns, 0u) << "timed on the launching thread";
  EXPECT_TRUE(ran_on_launch) << "no epoch ran on the launching thread in its arm";
  EXPECT_EQ(s.epochs_on_launch, tiering->policy_stats().epochs.second);
  EXPECT_GT(s.promoted_bytes, 0u) << "period " << tiering->policy_stats().period << ", promotions asked "
                                  << tiering->policy_stats().promotions << ", moves " << tiering->mover().stats().moves
                                  << ", failed " << tiering->mover().stats().moves_failed << ", holds given up "
                                  << tiering->mover().stats().holds_given_up;
  ASSERT_CU(tiering->mover().run_until_idle());
  tiering->mover().stop();
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(all_equal(weights[i], 8 * kMiB, 0x7000 + i)) << "weight " << i;
}

}  // namespace
