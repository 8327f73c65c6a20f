// Memory freed on streams, not yet known done with (pending_frees.h).
#include "pool/pending_frees.h"

#include <algorithm>
#include <functional>

#include "config/log.h"
#include "driver/capture_mode.h"
#include "driver/context_scope.h"
#include "pool/device_pool.h"  // process_exiting

namespace uvmpool::pool {
using ScopedContext = driver::ContextScope;

std::size_t StreamKeyHash::operator()(const StreamKey& k) const {
  const auto a = reinterpret_cast<std::uintptr_t>(k.stream);
  const auto b = reinterpret_cast<std::uintptr_t>(k.context);
  return std::hash<std::uintptr_t>()(a * 31 + b) ^ std::hash<std::thread::id>()(k.thread);
}

PendingFrees::PendingFrees(const driver::Table& driver, int device, const std::atomic<DeviceWaits*>& waits)
    : d_(driver), device_(device), device_waits_(waits) {}

PendingFrees::~PendingFrees() {
  MutexLock lock(mu_);
  for (const Batch& b : batches_) d_.cuEventDestroy_v2(b.event);
  for (const Spare& s : spare_events_) d_.cuEventDestroy_v2(s.event);
}

CUevent PendingFrees::take_event(CUcontext context) {
  for (auto it = spare_events_.rbegin(); it != spare_events_.rend(); ++it) {
    if (it->context != context) continue;
    CUevent e = it->event;
    spare_events_.erase(std::next(it).base());
    return e;
  }
  CUevent e = nullptr;
  if (d_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

std::optional<PendingItem> PendingFrees::add(const StreamKey& stream, PendingItem item) {
  count_.fetch_add(1, std::memory_order_relaxed);
  if (stream.stream != CU_STREAM_PER_THREAD) {
    MutexLock lock(mu_);
    open_[stream].push_back(item);
    return std::nullopt;
  }
  UniqueMutexLock lock(mu_);
  CUevent e = take_event(stream.context);
  if (e != nullptr && d_.cuEventRecord(e, CU_STREAM_PER_THREAD) == CUDA_SUCCESS) {
    // No stream to reuse it early on: the key names the thread, whose id the next thread may get.
    batches_.push_back(Batch{e, stream.context, {item}, std::nullopt});
    return std::nullopt;
  }
  if (e != nullptr) spare_events_.push_back(Spare{stream.context, e});
  lock.unlock();
  // No event: wait for the stream here rather than risk reusing memory it may still touch.
  d_.cuStreamSynchronize(CU_STREAM_PER_THREAD);
  count_.fetch_sub(1, std::memory_order_relaxed);
  return item;
}

std::vector<PendingItem> PendingFrees::collect(bool wait) {
  std::vector<PendingItem> ready;
  if (empty() || process_exiting()) return ready;
  MutexLock lock(mu_);
  seal_streams_locked(nullptr, &ready);
  std::optional<DeviceWaitScope> waiting;  // mu_ is held, which an allocation under the pool's mu_ may wait for
  if (wait && !batches_.empty()) waiting.emplace(device_waits_);
  // The queries are the pool's, not the program's: made relaxed, they spoil no other thread's capture.
  std::optional<driver::RelaxedCapture> relaxed;
  if (!batches_.empty()) relaxed.emplace(d_);
  for (auto it = batches_.begin(); it != batches_.end();) {
    const CUresult r = wait ? d_.cuEventSynchronize(it->event) : d_.cuEventQuery(it->event);
    // Not known done: still running, or (recorded into a capture after all) not an answer about it.
    if (r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_CAPTURED_EVENT || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
      ++it;
      continue;
    }
    if (r != CUDA_SUCCESS) log::warn("device {}: waiting for freed stream memory: event error {}", device_, static_cast<int>(r));
    ready.insert(ready.end(), it->items.begin(), it->items.end());
    spare_events_.push_back(Spare{it->context, it->event});
    it = batches_.erase(it);
  }
  count_.fetch_sub(ready.size(), std::memory_order_relaxed);
  return ready;
}

std::vector<PendingItem> PendingFrees::seal(CUstream stream) {
  std::vector<PendingItem> ready;
  if (empty() || process_exiting()) return ready;
  MutexLock lock(mu_);
  seal_streams_locked(&stream, &ready);
  // Its handle may name another stream once it is destroyed: its batches are no one's to reuse early.
  for (Batch& b : batches_)
    if (b.stream && b.stream->stream == stream) b.stream.reset();
  count_.fetch_sub(ready.size(), std::memory_order_relaxed);
  return ready;
}

std::vector<PendingItem> PendingFrees::forget_context(CUcontext context) {
  std::vector<PendingItem> ready;
  if (context == nullptr || process_exiting()) return ready;
  MutexLock lock(mu_);
  const auto its = [&](const auto& o) { return o.first.context == context; };
  const auto of_it = [&](const Batch& b) { return b.context == context; };
  if (std::any_of(open_.begin(), open_.end(), its) || std::any_of(batches_.begin(), batches_.end(), of_it)) {
    // The destruction would wait for the context's work too; waited for here, the frees are known done.
    // (Not current any more, it has been destroyed already: its work is gone with it.)
    ScopedContext in(d_, context);
    const DeviceWaitScope waiting(device_waits_);  // mu_ is held
    if (in.status() == CUDA_SUCCESS)
      if (const CUresult r = d_.cuCtxSynchronize(); r != CUDA_SUCCESS)
        log::warn("device {}: waiting for a context before its destruction: error {}; its freed memory is reused all "
                  "the same", device_, static_cast<int>(r));
  }
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->first.context != context) {
      ++it;
      continue;
    }
    ready.insert(ready.end(), it->second.begin(), it->second.end());
    it = open_.erase(it);
  }
  for (auto it = batches_.begin(); it != batches_.end();) {
    if (it->context != context) {
      ++it;
      continue;
    }
    ready.insert(ready.end(), it->items.begin(), it->items.end());
    d_.cuEventDestroy_v2(it->event);
    it = batches_.erase(it);
  }
  std::erase_if(spare_events_, [&](const Spare& s) {
    if (s.context != context) return false;
    d_.cuEventDestroy_v2(s.event);
    return true;
  });
  count_.fetch_sub(ready.size(), std::memory_order_relaxed);
  return ready;
}

void PendingFrees::seal_streams_locked(const CUstream* only, std::vector<PendingItem>* ready) {
  for (auto it = open_.begin(); it != open_.end();) {
    if (only != nullptr && it->first.stream != *only) {
      ++it;
      continue;
    }
    // A stream capturing a graph since its frees: an event recorded on it now would go into the
    // graph, not after the work queued before the capture, and answer as done. Left open until the
    // capture ends (the stream's destruction seals it all the same).
    if (only == nullptr && capturing(it->first)) {
      ++it;
      continue;
    }
    seal_locked(it->first, it->second, ready);
    it = open_.erase(it);  // streams come and go; keep no entry for an idle one
  }
}

bool PendingFrees::capturing(const StreamKey& key) const {
  if (d_.cuStreamIsCapturing == nullptr) return false;
  ScopedContext in(d_, key.context);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return d_.cuStreamIsCapturing(key.stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void PendingFrees::seal_locked(const StreamKey& key, std::vector<PendingItem>& open, std::vector<PendingItem>* ready) {
  if (open.empty()) return;
  ScopedContext in(d_, key.context);
  CUevent e = take_event(key.context);
  if (e != nullptr && d_.cuEventRecord(e, key.stream) == CUDA_SUCCESS) {
    batches_.push_back(Batch{e, key.context, std::move(open), key});
  } else {
    // Events fail (or the stream is already gone): its work may still run, so wait for the whole
    // context before reusing what was freed on it.
    if (e != nullptr) spare_events_.push_back(Spare{key.context, e});
    const DeviceWaitScope waiting(device_waits_);  // mu_ is held
    d_.cuCtxSynchronize();
    ready->insert(ready->end(), open.begin(), open.end());
  }
  open.clear();
}

}  // namespace uvmpool::pool
