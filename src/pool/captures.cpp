#include "pool/captures.h"

#include <algorithm>

namespace uvmpool::pool {

bool Captures::over(const Capture& c) const {
  if (!c.answered) return false;  // being begun
  // Another thread's per-thread stream cannot be named from here: under way until its own thread ends it.
  if (c.stream == CU_STREAM_PER_THREAD && c.thread != std::this_thread::get_id()) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d_.cuStreamIsCapturing == nullptr) return true;
  // An error: the stream is gone (destroyed with its capture).
  return d_.cuStreamIsCapturing(c.stream, &status) != CUDA_SUCCESS || status == CU_STREAM_CAPTURE_STATUS_NONE;
}

void Captures::beginning(CUcontext context, CUstream stream) {
  if (stream == nullptr) stream = CU_STREAM_LEGACY;
  MutexLock lock(mu_);
  captures_.push_back({context, stream, std::this_thread::get_id(), false});
  any_.store(true, std::memory_order_release);
}

void Captures::begun(CUstream stream, bool began) {
  if (stream == nullptr) stream = CU_STREAM_LEGACY;
  MutexLock lock(mu_);
  const auto it = std::find_if(captures_.begin(), captures_.end(), [&](const Capture& c) {
    return !c.answered && c.stream == stream && c.thread == std::this_thread::get_id();
  });
  if (it == captures_.end()) return;
  if (began)
    it->answered = true;
  else
    captures_.erase(it);
  any_.store(!captures_.empty(), std::memory_order_release);
}

void Captures::ended(CUstream stream) {
  if (stream == nullptr) stream = CU_STREAM_LEGACY;
  if (!any_.load(std::memory_order_acquire)) return;
  MutexLock lock(mu_);
  std::erase_if(captures_, [&](const Capture& c) { return c.stream == stream && over(c); });
  any_.store(!captures_.empty(), std::memory_order_release);
}

bool Captures::under_way(CUcontext context) {
  if (!any_.load(std::memory_order_acquire)) return false;
  MutexLock lock(mu_);
  // The legacy stream is asked about in the context current here: only its own context's entry.
  std::erase_if(captures_, [&](const Capture& c) {
    return (c.stream != CU_STREAM_LEGACY || c.context == context) && over(c);
  });
  any_.store(!captures_.empty(), std::memory_order_release);
  return std::any_of(captures_.begin(), captures_.end(), [&](const Capture& c) {
    return c.context == context && (c.answered || c.thread != std::this_thread::get_id());
  });
}

}  // namespace uvmpool::pool
