// The learned period's GPU time, for the policy's trials (period_trial.h): an event recorded on
// the program's stream as each period's first launch is queued, and the time between two periods'
// events once the device has passed the second.
//
// Why the GPU's time and not the host's: the host may queue far ahead of the device, and under the
// simulator only the driver's clock is modeled (its events answer in virtual time). Why events on
// the program's stream: the period's work is the program's, and an event costs no wait; the query is
// made a few periods later, when the device has long passed it, so nothing blocks.
//
// Not recorded while a capture is under way (the event would join the capture, and queries may be
// refused). The events belong to the context current at the first mark; a period that begins in
// another context is not timed, and a driver error stops the clock for good (the guard then stays on,
// as without a trial). Not thread-safe: the policy's lock serializes it (Tiering::show_policy).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "driver/driver_api.h"
#include "tiering/period_trial.h"

namespace uvmpool::tiering {

class PeriodClock {
 public:
  explicit PeriodClock(const driver::Table& d) : d_(d) {}
  ~PeriodClock();
  PeriodClock(const PeriodClock&) = delete;
  PeriodClock& operator=(const PeriodClock&) = delete;

  // Period `n` begins on `stream` (the calling thread just queued its first launch there). Answers the
  // oldest period not answered yet whose time is known, if any.
  std::optional<PeriodTrial::Time> mark(std::uint64_t n, CUstream stream, bool capturing);

  bool stopped() const { return failed_; }

 private:
  // The events of the last few periods: enough that a period's time is still there when the device
  // has run it, while the host queues a few periods ahead.
  static constexpr std::size_t kSlots = 8;
  struct Slot {
    CUevent event = nullptr;
    std::uint64_t period = 0;  // the period whose start it marks (0: none)
  };
  std::optional<PeriodTrial::Time> answer();
  void fail(const char* what, CUresult r);

  const driver::Table& d_;
  std::array<Slot, kSlots> slots_{};
  CUcontext context_ = nullptr;  // the events' context (null: none made yet)
  std::uint64_t answered_ = 0;   // the last period answered
  bool failed_ = false;
};

}  // namespace uvmpool::tiering
