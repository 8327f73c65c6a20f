// Streams and events. Executing every operation synchronously at submission is a legal schedule, so
// streams are always complete (cuStreamQuery -> CUDA_SUCCESS) and events complete when recorded.
// Stream capture is not simulated: cuStreamIsCapturing always answers CU_STREAM_CAPTURE_STATUS_NONE.
#include "sim/streams_events.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  const Context* context;
  unsigned flags;
  int priority;
};

struct Event {
  const Context* context;
  unsigned flags;
  bool recorded = false;
  Clock::time_point when{};
};

struct Objects {
  std::mutex mutex;
  std::unordered_map<const void*, std::unique_ptr<Stream>> streams;
  std::unordered_map<const void*, std::unique_ptr<Event>> events;
};

Objects& objects() {
  static Objects* const instance = new Objects;  // never destroyed: calls may come during exit
  return *instance;
}

// H100's range, as cuCtxGetStreamPriorityRange reports it: 0 (least) to -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

bool is_default_stream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

CUresult create_stream(CUstream* phStream, unsigned flags, int priority) {
  if (phStream == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  // Out-of-range priorities are clamped, as the real driver does.
  priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  auto stream = std::make_unique<Stream>(Stream{context, flags, priority});
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  *phStream = reinterpret_cast<CUstream>(stream.get());
  o.streams.emplace(stream.get(), std::move(stream));
  return CUDA_SUCCESS;
}

// Runs `use` on the live event `handle` under the lock; CUDA_ERROR_INVALID_HANDLE if there is none.
template <typename Use>
CUresult with_event(CUevent handle, Use&& use) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  auto it = o.events.find(handle);
  if (it == o.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  return use(*it->second);
}

CUresult record(CUevent hEvent, CUstream hStream) {
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  const Clock::time_point now = Clock::now();
  return with_event(hEvent, [&](Event& event) {
    event.recorded = true;
    event.when = now;
    return CUDA_SUCCESS;
  });
}

CUresult wait_event(CUstream hStream, CUevent hEvent, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  return with_event(hEvent, [](Event&) { return CUDA_SUCCESS; });
}

CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult idle_stream(CUstream hStream) {
  Context* context = nullptr;
  return stream_context(hStream, &context);
}

}  // namespace

CUresult stream_context(CUstream stream, Context** out) {
  if (is_default_stream(stream)) return current_context(out);
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  auto it = o.streams.find(stream);
  if (it == o.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = const_cast<Context*>(it->second->context);
  return CUDA_SUCCESS;
}

void release_context_streams_events(const Context* context) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  std::erase_if(o.streams, [&](const auto& entry) { return entry.second->context == context; });
  std::erase_if(o.events, [&](const auto& entry) { return entry.second->context == context; });
}

CUresult impl::cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return create_stream(phStream, Flags, kLeastPriority);
}

CUresult impl::cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return create_stream(phStream, flags, priority);
}

// The default streams are not destroyable.
CUresult impl::cuStreamDestroy_v2(CUstream hStream) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  return o.streams.erase(hStream) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult impl::cuStreamSynchronize(CUstream hStream) { return idle_stream(hStream); }
CUresult impl::cuStreamSynchronize_ptsz(CUstream hStream) { return idle_stream(hStream); }
CUresult impl::cuStreamQuery(CUstream hStream) { return idle_stream(hStream); }
CUresult impl::cuStreamQuery_ptsz(CUstream hStream) { return idle_stream(hStream); }

CUresult impl::cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags);
}
CUresult impl::cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags);
}

CUresult impl::cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}
CUresult impl::cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}

CUresult impl::cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events cannot time.
  if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  auto event = std::make_unique<Event>(Event{context, Flags});
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  *phEvent = reinterpret_cast<CUevent>(event.get());
  o.events.emplace(event.get(), std::move(event));
  return CUDA_SUCCESS;
}

CUresult impl::cuEventDestroy_v2(CUevent hEvent) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  return o.events.erase(hEvent) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult impl::cuEventRecord(CUevent hEvent, CUstream hStream) { return record(hEvent, hStream); }
CUresult impl::cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return record(hEvent, hStream); }

// Recorded work is complete at once, and so is an event never recorded (as in the real driver).
CUresult impl::cuEventQuery(CUevent hEvent) {
  return with_event(hEvent, [](Event&) { return CUDA_SUCCESS; });
}
CUresult impl::cuEventSynchronize(CUevent hEvent) {
  return with_event(hEvent, [](Event&) { return CUDA_SUCCESS; });
}

CUresult impl::cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  auto start = o.events.find(hStart);
  auto end = o.events.find(hEnd);
  if (start == o.events.end() || end == o.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  const Event& a = *start->second;
  const Event& b = *end->second;
  // Never recorded, or created without timing: CUDA_ERROR_INVALID_HANDLE, as documented.
  if (!a.recorded || !b.recorded || ((a.flags | b.flags) & CU_EVENT_DISABLE_TIMING) != 0)
    return CUDA_ERROR_INVALID_HANDLE;
  *pMilliseconds = std::chrono::duration<float, std::milli>(b.when - a.when).count();
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim
