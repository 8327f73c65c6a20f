// A trial between two ways of running the learned period, by its GPU time: which one the policy
// keeps. Two trials use it (policy.h):
//
// - The thrash guard (first: on; second: off). The guard reads a buffer in place when it is touched
//   once a period and could only stay by pushing others out: moving it costs its bytes twice over
//   PCIe (in, then out for room), reading it in place once. That holds for a kernel that reads each
//   byte once (a batch-1 decode's GEMV). It fails for one that reads its operand many times: measured
//   on an H100 (tests/gpu/graph_replay.py, docs/gpu-results.md), 16 GEMM layers of 8192x8192 bf16
//   weights at batch 4096, with the weights read in place, ran 76x slower than native (each weight
//   tile is read once per tile of the batch, over PCIe), while moving all 2 GiB in and out a step
//   costs about 80 ms. What a kernel does with its operands is not visible from its launch.
// - Which thread runs the mover's epochs (first: the mover's own; second: the launching thread,
//   UVMPOOL_TIERING_EPOCHS). Measured on an H200 (docs/gpu-results.md, thirtieth session): GPT-2-medium
//   training at a third of its memory ran 2.8 s a step with epochs on the launching thread against
//   4.4 s on the mover's, and GPT-2-XL decoding 9.6 tok/s against 12.7. A training step keeps the
//   device a step behind the program, so an epoch run where the program asks for it lands in time and
//   costs the program's thread nothing the device waits for; a decode's device waits for each launch,
//   so every moment the launching thread spends in an epoch adds to the token. What kind of program
//   this is does not show in its launches either.
//
// So the answer is measured, not guessed:
//
//   - The trial begins when the second way could matter (the guard kept a buffer in place, or moves
//     were asked for, in the period that ended) under a learned period. The period's GPU time (events
//     between the starts of two periods, Policy::World::period_started) is taken the first way for
//     `samples` periods, then the second way for `samples` periods after one period of transition
//     (the first period of the new way moves what the old one left).
//   - The second way is kept when even its slowest sample beat the first way's fastest by more than
//     `margin`; otherwise the first. A stall of the host lengthens a period and nothing shortens one,
//     so an arm's time is the least of its samples; but one sample of the second way lucky enough to
//     beat the first by a tenth is no win where periods vary that much by themselves: on an H200
//     (docs/gpu-results.md, thirty-third session) one GPT-2-XL decode's guard trial timed 84.6 ms on
//     against 125.8 off, the next run's 110.1 against 101.9, a hair from turning the guard off
//     (which moves every slot the guard keeps in place, in and out, each token).
//   - Decided, the way's period time is still watched: `drift` times slower or faster for `samples`
//     periods in a row (the batch changed, the program moved on) starts a new trial. A trial the
//     drift began that kept the way it began from found noise, not a change: the watch then waits
//     `backoff` periods after the decision before it counts again, twice as long after each such
//     trial, so noise costs a share of the periods that halves with each trial (an arm of a guard's
//     trial moves whatever the guard kept in place). rebase() makes the next sample the new
//     reference instead (the other trial changed the period's time), and retry() starts a new trial
//     at once (the other trial changed what this one compares: the policy retries the guard once the
//     epochs go to the launching thread).
//   - No time measured within `patience` periods (no clock, events refused, a capture under way):
//     the first way, as before the trial.
//   - A new period learned starts over (reset, Policy::adopt_period).
//
// Not thread-safe: the policy's (Tiering serializes it).
#pragma once

#include <cstdint>
#include <optional>

namespace uvmpool::tiering {

// A trial's setting: measured, or fixed to one way (UVMPOOL_TIERING_THRASH_GUARD on|off,
// UVMPOOL_TIERING_EPOCHS thread|launch).
enum class TrialSetting : std::uint8_t { Measure, First, Second };

struct PeriodTrialConfig {
  TrialSetting setting = TrialSetting::Measure;
  std::uint32_t samples = 2;    // periods timed per arm
  double margin = 0.9;          // the second way must take at most this fraction of the first's time to win
  double drift = 1.5;           // the decided way's time off by this factor: try again
  std::uint32_t patience = 8;   // periods an arm waits for its samples before the trial gives up
  std::uint32_t backoff = 16;   // periods the drift watch first waits after a drift's trial kept the way
  // For the log line of each decision: what is tried, and its two ways.
  const char* what = "thrash guard";
  const char* first_name = "on";
  const char* second_name = "off";
};

struct PeriodTrialStats {
  std::uint64_t trials = 0;     // trials begun
  std::uint64_t second = 0;     // 1 while the second way is in use
  std::uint64_t timing = 0;     // 1 while an arm is timed
  std::uint64_t first_ns = 0;   // the last trial's period time the first way (0: none measured)
  std::uint64_t second_ns = 0;  // ... and the second
};

class PeriodTrial {
 public:
  explicit PeriodTrial(PeriodTrialConfig config = {});

  // Whether the first way is in use in the period under way.
  bool first() const { return first_; }
  // Whether an arm is being timed (the policy runs one trial at a time: each changes the other's time).
  bool timing() const { return stats_.timing != 0; }

  // A period's GPU time.
  struct Time {
    std::uint64_t period = 0;
    std::uint64_t ns = 0;
  };
  // Period `n` begins (numbers only grow). `measured`: an earlier period's GPU time, when one came.
  // `could_matter`: in the period that ended, the second way could have changed something.
  void period_started(std::uint64_t n, std::optional<Time> measured, bool could_matter);

  // A new period was learned: the first way, no trial until the second could matter again.
  void reset();
  // Decided: the next period's time is the reference for the drift watch (another trial changed it).
  void rebase(std::uint64_t n);
  // Decided: a new trial from the next period (period n carries the other trial's transition), as
  // when the decided way's time drifts. False (nothing done) when not decided.
  bool retry(std::uint64_t n);
  // Decided, or no trial begun: the way `first` instead, untimed (another trial needs it: `why`, for
  // the log), decided from now and watched from the next period, whose time becomes the reference.
  // False (nothing done) while an arm is timed, or when the setting is fixed.
  bool choose(bool first, std::uint64_t n, const char* why);

  PeriodTrialStats stats() const { return stats_; }

 private:
  enum class State : std::uint8_t { Idle, TimeFirst, TimeSecond, Decided };
  static constexpr std::uint64_t kMaxQuiet = 1 << 12;  // the backoff's cap, in periods
  // A trial begins at period `n`, its first arm's samples from `first_counted` on.
  void begin_trial(std::uint64_t n, std::uint64_t first_counted, bool by_drift);
  // Starts timing the arm `first` with period `n`: its samples are periods from `first_counted` on.
  void time_arm(bool first, std::uint64_t n, std::uint64_t first_counted);
  void decide(bool first, std::uint64_t n);

  const PeriodTrialConfig config_;
  PeriodTrialStats stats_;
  State state_ = State::Idle;
  bool first_ = true;
  std::uint64_t first_counted_ = 0;  // the first period whose time counts for the state under way
  std::uint64_t arm_began_ = 0;      // the period the state began (patience)
  std::uint32_t samples_ = 0;        // samples taken in this state
  std::uint64_t best_ns_ = 0;        // the least of them
  std::uint64_t worst_ns_ = 0;       // the greatest
  bool by_drift_ = false;            // the trial under way began from a drift
  bool began_on_first_ = false;     // ... with the first way in use
  std::uint64_t quiet_ = 0;          // decided: periods after first_counted_ that the drift watch waits
  std::uint32_t drifted_ = 0;        // decided: samples in a row off by `drift`
  std::uint64_t decided_ns_ = 0;     // decided: the way's time (0: none measured, nothing to watch)
  bool rebased_ = false;             // decided: the next counted sample becomes decided_ns_
};

}  // namespace uvmpool::tiering
