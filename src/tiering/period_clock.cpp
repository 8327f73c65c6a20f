#include "tiering/period_clock.h"

#include "config/log.h"
#include "driver/context_scope.h"

namespace uvmpool::tiering {

PeriodClock::~PeriodClock() {
  if (context_ == nullptr) return;
  const driver::ContextScope in(d_, context_);
  if (in.status() != CUDA_SUCCESS) return;  // the context is gone, and its events with it
  for (Slot& s : slots_)
    if (s.event != nullptr) d_.cuEventDestroy_v2(s.event);
}

void PeriodClock::fail(const char* what, CUresult r) {
  failed_ = true;
  log::info("tiering: the thrash guard's clock stopped ({} failed, error {}); the guard stays on",
            what, static_cast<int>(r));
}

std::optional<PeriodTrial::Time> PeriodClock::answer() {
  // The oldest pair of consecutive periods both marked, if the device has passed its second mark.
  const Slot* from = nullptr;
  for (const Slot& s : slots_) {
    const bool pair = s.period > answered_ && slots_[(s.period + 1) % kSlots].period == s.period + 1;
    if (pair && (from == nullptr || s.period < from->period)) from = &s;
  }
  if (from == nullptr) return std::nullopt;
  const Slot& to = slots_[(from->period + 1) % kSlots];
  const CUresult q = d_.cuEventQuery(to.event);
  if (q == CUDA_ERROR_NOT_READY) return std::nullopt;
  if (q != CUDA_SUCCESS) {
    fail("cuEventQuery", q);
    return std::nullopt;
  }
  float ms = 0;
  if (const CUresult r = d_.cuEventElapsedTime_v2(&ms, from->event, to.event); r != CUDA_SUCCESS) {
    fail("cuEventElapsedTime", r);
    return std::nullopt;
  }
  answered_ = from->period;
  return PeriodTrial::Time{from->period, static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6)};
}

std::optional<PeriodTrial::Time> PeriodClock::mark(std::uint64_t n, CUstream stream, bool capturing) {
  if (failed_ || n == 0) return std::nullopt;
  Slot& slot = slots_[n % kSlots];
  slot.period = 0;  // whatever it marked is lost (the host ran kSlots periods ahead)
  if (capturing) return std::nullopt;
  CUcontext current = nullptr;
  if (d_.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) return std::nullopt;
  if (context_ == nullptr) {
    for (Slot& s : slots_) {
      if (const CUresult r = d_.cuEventCreate(&s.event, CU_EVENT_DEFAULT); r != CUDA_SUCCESS) {
        s.event = nullptr;
        context_ = current;  // the destructor frees those made
        fail("cuEventCreate", r);
        return std::nullopt;
      }
    }
    context_ = current;
  }
  if (current != context_) return std::nullopt;  // another context's period: not timed
  std::optional<PeriodTrial::Time> time = answer();
  if (failed_) return std::nullopt;
  if (const CUresult r = d_.cuEventRecord(slot.event, stream); r != CUDA_SUCCESS) {
    fail("cuEventRecord", r);
    return time;
  }
  slot.period = n;
  return time;
}

}  // namespace uvmpool::tiering
