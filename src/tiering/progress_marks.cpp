#include "tiering/progress_marks.h"

#include "config/log.h"
#include "driver/context_scope.h"

namespace uvmpool::tiering {

ProgressMarks::~ProgressMarks() {
  MutexLock lock(mu_);
  if (context_ == nullptr) return;
  const driver::ContextScope in(d_, context_);
  if (in.status() != CUDA_SUCCESS) return;  // the context is gone, and its events with it
  for (Slot& s : slots_)
    if (s.event != nullptr) d_.cuEventDestroy_v2(s.event);
}

void ProgressMarks::launched(CUstream stream, bool capturing) {
  if (capturing) return;  // nothing queued: the graph's launch is counted when it comes
  const std::uint64_t launch = launches_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (launch % every_ != 0) return;
  MutexLock lock(mu_);
  if (failed_) return;
  CUcontext current = nullptr;
  if (d_.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) return;
  if (context_ == nullptr) {
    context_ = current;  // the destructor frees what was made, even on a failure here
    for (Slot& s : slots_) {
      if (const CUresult r = d_.cuEventCreate(&s.event, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
        s.event = nullptr;
        failed_ = true;
        log::info("tiering: progress marks stopped (cuEventCreate failed, error {}); a hold not drained "
                  "within the hold timeout is given up",
                  static_cast<int>(r));
        return;
      }
    }
  }
  if (current != context_) return;  // another context's launch: not marked
  Slot& slot = slots_[recorded_ % kSlots];
  if (const CUresult r = d_.cuEventRecord(slot.event, stream); r != CUDA_SUCCESS) {
    failed_ = true;
    log::info("tiering: progress marks stopped (cuEventRecord failed, error {}); a hold not drained "
              "within the hold timeout is given up",
              static_cast<int>(r));
    return;
  }
  slot.mark = ++recorded_;
  slot.launch = launch;
}

std::uint64_t ProgressMarks::passed() {
  MutexLock lock(mu_);
  if (context_ == nullptr || failed_) return passed_;
  const driver::ContextScope in(d_, context_);
  if (in.status() != CUDA_SUCCESS) return passed_;
  for (const Slot& s : slots_) {
    if (s.mark <= passed_) continue;
    if (d_.cuEventQuery(s.event) != CUDA_SUCCESS) continue;  // an error: not passed
    passed_ = s.mark;
    // The newest passed so far. Marks pass in order on one stream; across streams a later mark may pass
    // before an earlier one, and the count then runs ahead of the slower stream (a bound no more).
    completed_.store(s.launch, std::memory_order_release);
  }
  return passed_;
}

}  // namespace uvmpool::tiering
