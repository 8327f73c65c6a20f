// Whether the thrash guard is on: a trial of the learned period's GPU time with it on and off.
//
// The guard (policy.h) reads a buffer in place when it is touched once a period and could only stay
// by pushing others out: moving it costs its bytes twice over PCIe (in, then out for room), reading
// it in place once. That holds for a kernel that reads each byte once (a batch-1 decode's GEMV). It
// fails for one that reads its operand many times: measured on an H100 (tests/gpu/graph_replay.py,
// docs/gpu-results.md), 16 GEMM layers of 8192x8192 bf16 weights at batch 4096, with the weights
// read in place, ran 76x slower than native (each weight tile is read once per tile of the batch,
// over PCIe), while moving all 2 GiB in and out a step costs about 80 ms. What a kernel does with its
// operands is not visible from its launch, so the answer is measured, not guessed:
//
//   - The trial begins when the guard keeps a buffer in place under a learned period. The period's
//     GPU time (events between the starts of two periods, Policy::World::period_started) is taken
//     with the guard on for `samples` periods, then with it off for `samples` periods after one
//     period of transition (the first period of the new setting moves what the old one left).
//   - The guard goes off when that made the period faster by more than `margin`; otherwise it stays
//     on (fewer bytes over PCIe for the same time). Each arm's time is the least of its samples: a
//     stall of the host lengthens a period, nothing shortens one.
//   - Decided, the setting's period time is still watched: `drift` times slower or faster for
//     `samples` periods in a row (the batch changed, the program moved on) starts a new trial.
//   - No time measured within `patience` periods (no clock, events refused, a capture under way):
//     the guard stays on, as before the trial.
//   - A new period learned starts over (Policy::adopt_period).
//
// Not thread-safe: the policy's (Tiering serializes it).
#pragma once

#include <cstdint>
#include <optional>

namespace uvmpool::tiering {

// The thrash guard's setting (UVMPOOL_TIERING_THRASH_GUARD): measured by the trial, or fixed.
enum class GuardSetting : std::uint8_t { Measure, On, Off };

struct GuardTrialConfig {
  GuardSetting setting = GuardSetting::Measure;
  std::uint32_t samples = 2;    // periods timed per arm
  double margin = 0.9;          // off must take at most this fraction of on's time to win
  double drift = 1.5;           // the decided setting's time off by this factor: try again
  std::uint32_t patience = 8;   // periods an arm waits for its samples before the trial gives up
};

struct GuardTrialStats {
  std::uint64_t trials = 0;     // trials begun
  std::uint64_t off = 0;        // 1 while the guard is off
  std::uint64_t on_ns = 0;      // the last trial's period time with the guard on (0: none measured)
  std::uint64_t off_ns = 0;     // ... and off
};

class GuardTrial {
 public:
  explicit GuardTrial(GuardTrialConfig config = {});

  // Whether the guard keeps single-use buffers in place in the period under way.
  bool on() const { return on_; }

  // A period's GPU time.
  struct Time {
    std::uint64_t period = 0;
    std::uint64_t ns = 0;
  };
  // Period `n` begins (numbers only grow). `measured`: an earlier period's GPU time, when one came.
  // `kept_last_period`: the guard kept a buffer in place in the period that ended.
  void period_started(std::uint64_t n, std::optional<Time> measured, bool kept_last_period);

  // A new period was learned: the guard on, no trial until it keeps something in place again.
  void reset();

  GuardTrialStats stats() const { return stats_; }

 private:
  enum class State : std::uint8_t { Idle, TimeOn, TimeOff, Decided };
  // Starts timing the arm `on` with period `n`: its samples are periods from `first_counted` on.
  void time_arm(bool on, std::uint64_t n, std::uint64_t first_counted);
  void decide(bool on, std::uint64_t n);

  const GuardTrialConfig config_;
  GuardTrialStats stats_;
  State state_ = State::Idle;
  bool on_ = true;
  std::uint64_t first_counted_ = 0;  // the first period whose time counts for the state under way
  std::uint64_t arm_began_ = 0;      // the period the state began (patience)
  std::uint32_t samples_ = 0;        // samples taken in this state
  std::uint64_t best_ns_ = 0;        // the least of them
  std::uint32_t drifted_ = 0;        // decided: samples in a row off by `drift`
  std::uint64_t decided_ns_ = 0;     // decided: the setting's time (0: none measured, nothing to watch)
};

}  // namespace uvmpool::tiering
