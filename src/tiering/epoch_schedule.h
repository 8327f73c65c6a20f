// When the launching thread runs the mover's next epoch (UVMPOOL_TIERING_EPOCHS=launch).
//
// With epochs on the launching thread, an epoch runs inside Tiering::after_launch: it holds the
// program's streams, waits for the work queued before the hold, copies and remaps, so every move it
// carries lands before the next launch is queued. Each epoch costs a hold (a drain, and the remaps of
// its last moves, which no copy hides), so fewer, larger epochs cost less, as long as every move
// still lands before the launch that needs it.
//
// The policy knows that launch for its asks of a learned period: it promotes a buffer `needed_in`
// launches before its next use (and demotes others then to make room). An ask is **due** at the
// launch one before the last one that still lands it in time, so that a promotion that the same
// epoch's demotions had to make room for, and which the mover puts back for the next epoch, still has
// a launch to spare; an epoch runs once the earliest queued ask is due. Asks that name no launch
// (recency before a period is learned, prefetches, advice), what an epoch leaves queued (a batch is
// full, a promotion waits for room, the epoch was put off), and requests the schedule was not told
// of go at a fixed cadence instead: an epoch every `cadence` launches while they are queued, as all
// asks did before.
//
// Modeled (uvmpool-bench-tiering, H200 constants, docs/tiering.md): training with held copies 87.6
// -> 81.6 ms a step (651 -> 374 epochs); decoding and batched decoding unchanged (their asks come a
// few launches ahead, where the cadence already ran them). Leaving what an epoch left due at the
// very next launch made batched decoding 1.24x slower (many small epochs).
//
// Thread-safe: asks come from whichever thread shows a launch to the policy (under the policy's
// lock), launches from every launching thread. A race between an ask and an epoch taking the queue
// can only make an epoch run earlier or later than it might; a move is an optimization, never a
// question of correctness (the hold is).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace uvmpool::tiering {

class EpochSchedule {
 public:
  static constexpr std::size_t kNoLaunch = ~std::size_t{0};  // an ask that names no launch

  explicit EpochSchedule(std::size_t cadence) : cadence_(std::max<std::size_t>(cadence, 1)) {}

  // A launch was shown to the policy; its asks follow.
  void shown() { shown_.fetch_add(1, std::memory_order_relaxed); }

  // An ask was queued while the launch last shown was planned for: the launch `needed_in` after the
  // next one (0: the next launch itself) is the first that needs it done; kNoLaunch: none named.
  void asked(std::size_t needed_in) {
    if (needed_in == kNoLaunch) {
      undated_.store(true, std::memory_order_relaxed);
      return;
    }
    // Run after launch shown + needed_in at the latest; one launch earlier, to spare one.
    const std::uint64_t due = shown_.load(std::memory_order_relaxed) + (needed_in > 0 ? needed_in - 1 : 0);
    std::uint64_t earliest = due_.load(std::memory_order_relaxed);
    while (due < earliest && !due_.compare_exchange_weak(earliest, due, std::memory_order_relaxed)) {
    }
  }

  // After a kernel launch while moves are queued: whether an epoch runs now. True forgets what was
  // due (the epoch takes the queue); report what it left with `ran`.
  bool launched() {
    const std::uint64_t since = since_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t due_at = due_.load(std::memory_order_relaxed);
    const bool due = shown_.load(std::memory_order_relaxed) >= due_at ||
                     ((due_at == kNever || undated_.load(std::memory_order_relaxed)) && since % cadence_ == 0);
    if (due) {
      due_.store(kNever, std::memory_order_relaxed);
      undated_.store(false, std::memory_order_relaxed);
    }
    return due;
  }

  // The epoch that launched() called for ran (or was put off); `left`: requests are still queued.
  // Their own due launches are not kept one by one: they go at the cadence, also while asks made
  // later wait for theirs (some of them were due first: a promotion put back for room).
  void ran(bool left) {
    if (left) undated_.store(true, std::memory_order_relaxed);
  }

 private:
  static constexpr std::uint64_t kNever = ~std::uint64_t{0};
  const std::size_t cadence_;
  std::atomic<std::uint64_t> shown_{0};       // launches shown to the policy
  std::atomic<std::uint64_t> due_{kNever};    // the shown count at which the earliest ask is due
  std::atomic<bool> undated_{false};          // a request without a due launch is queued
  std::atomic<std::uint64_t> since_{0};       // kernel launches seen while moves were queued
};

}  // namespace uvmpool::tiering
