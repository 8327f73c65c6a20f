// Streams and events. Executing every operation synchronously at submission is a legal schedule, so
// streams are complete (cuStreamQuery -> CUDA_SUCCESS) and events complete when recorded.
// Two test controls (sim_control.h) make the asynchrony that code above the driver must handle
// observable, without simulating any of it:
// - uvmpool_sim_hold_stream: a held created stream answers CUDA_ERROR_NOT_READY, and events recorded
//   on it stay incomplete until the hold ends (release, a synchronize that waits for it, or the
//   stream's destruction). The work itself (copies, allocations, frees) still happens at submission;
//   only what queries answer changes. Holds do not spread: a stream that cuStreamWaitEvent's an
//   incomplete event is not held, and default streams cannot be held.
// - uvmpool_sim_set_capture_status: what cuStreamIsCapturing answers for a created stream (NONE by
//   default, always NONE for default streams). Nothing else looks at it.
#include "sim/streams_events.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "sim/entry_points.h"
#include "sim/sim_control.h"

namespace uvmpool::sim {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  const Context* context;
  unsigned flags;
  int priority;
  bool held = false;  // uvmpool_sim_hold_stream
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;  // uvmpool_sim_set_capture_status
};

struct Event {
  const Context* context;
  unsigned flags;
  bool recorded = false;
  Clock::time_point when{};  // when it completed
  // The held stream it was last recorded on while held; nullptr once complete. Only a held stream
  // is ever named here, so releasing (or destroying) a stream clears every pointer to it.
  Stream* pending = nullptr;
};

// Fields of Stream and Event are guarded by mutex.
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

// The live created stream `handle`, or nullptr. Caller holds the mutex.
Stream* find_stream(Objects& o, CUstream handle) {
  auto it = o.streams.find(handle);
  return it == o.streams.end() ? nullptr : it->second.get();
}

// Ends the hold on `stream`: its work is done, so every event waiting for it completes now (as the
// GPU would timestamp it). Caller holds the mutex.
void finish_held_work(Objects& o, Stream& stream) {
  if (!stream.held) return;  // no event can be pending on a stream that is not held
  stream.held = false;
  const Clock::time_point now = Clock::now();
  for (auto& [handle, event] : o.events) {
    if (event->pending != &stream) continue;
    event->pending = nullptr;
    event->when = now;
  }
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

// A record replaces the event's previous state: incomplete if the stream is held, complete otherwise.
CUresult record(CUevent hEvent, CUstream hStream) {
  Context* context = nullptr;
  if (is_default_stream(hStream))
    if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  const Clock::time_point now = Clock::now();
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  Stream* stream = nullptr;
  if (!is_default_stream(hStream) && (stream = find_stream(o, hStream)) == nullptr)
    return CUDA_ERROR_INVALID_HANDLE;
  auto it = o.events.find(hEvent);
  if (it == o.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  Event& event = *it->second;
  event.recorded = true;
  event.when = now;
  event.pending = stream != nullptr && stream->held ? stream : nullptr;
  return CUDA_SUCCESS;
}

CUresult wait_event(CUstream hStream, CUevent hEvent, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = stream_context(hStream, &context); status != CUDA_SUCCESS) return status;
  return with_event(hEvent, [](Event&) { return CUDA_SUCCESS; });
}

CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (is_default_stream(hStream)) {
    Context* context = nullptr;
    if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  const Stream* stream = find_stream(o, hStream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *captureStatus = stream->capture;
  return CUDA_SUCCESS;
}

// cuStreamQuery (wait = false) and cuStreamSynchronize (wait = true, which finishes held work).
// Default streams are never held.
CUresult query_stream(CUstream hStream, bool wait) {
  if (is_default_stream(hStream)) {
    Context* context = nullptr;
    return current_context(&context);
  }
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  Stream* stream = find_stream(o, hStream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (wait) finish_held_work(o, *stream);
  return stream->held ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
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

void finish_context_work(const Context* context) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  for (auto& [handle, stream] : o.streams)
    if (stream->context == context) finish_held_work(o, *stream);
}

void release_context_streams_events(const Context* context) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  // Their work finishes, so no event (of any context) is left pending on a freed stream.
  for (auto& [handle, stream] : o.streams)
    if (stream->context == context) finish_held_work(o, *stream);
  std::erase_if(o.streams, [&](const auto& entry) { return entry.second->context == context; });
  std::erase_if(o.events, [&](const auto& entry) { return entry.second->context == context; });
}

CUresult impl::cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return create_stream(phStream, Flags, kLeastPriority);
}

CUresult impl::cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return create_stream(phStream, flags, priority);
}

// The default streams are not destroyable. As on the GPU, work still pending on a destroyed stream
// finishes: its events complete, and the hold goes with the stream.
CUresult impl::cuStreamDestroy_v2(CUstream hStream) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  Stream* stream = find_stream(o, hStream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  finish_held_work(o, *stream);
  o.streams.erase(hStream);
  return CUDA_SUCCESS;
}

CUresult impl::cuStreamSynchronize(CUstream hStream) { return query_stream(hStream, true); }
CUresult impl::cuStreamSynchronize_ptsz(CUstream hStream) { return query_stream(hStream, true); }
CUresult impl::cuStreamQuery(CUstream hStream) { return query_stream(hStream, false); }
CUresult impl::cuStreamQuery_ptsz(CUstream hStream) { return query_stream(hStream, false); }

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

// Recorded work is complete at once unless recorded on a held stream; an event never recorded is
// complete (as in the real driver).
CUresult impl::cuEventQuery(CUevent hEvent) {
  return with_event(hEvent, [](Event& event) {
    return event.pending != nullptr ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  });
}
// Waiting for an event recorded on a held stream finishes that stream's held work.
CUresult impl::cuEventSynchronize(CUevent hEvent) {
  return with_event(hEvent, [](Event& event) {
    if (event.pending != nullptr) finish_held_work(objects(), *event.pending);
    return CUDA_SUCCESS;
  });
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
  if (a.pending != nullptr || b.pending != nullptr) return CUDA_ERROR_NOT_READY;  // as documented
  *pMilliseconds = std::chrono::duration<float, std::milli>(b.when - a.when).count();
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim

using namespace uvmpool::sim;

// Default and unknown streams are ignored: holding them would have to model the legacy stream's
// implicit synchronization with every blocking stream, which no test needs yet.
extern "C" __attribute__((visibility("default"))) void uvmpool_sim_hold_stream(CUstream stream, int held) {
  if (is_default_stream(stream)) return;
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  Stream* s = find_stream(o, stream);
  if (s == nullptr) return;
  if (held != 0)
    s->held = true;
  else
    finish_held_work(o, *s);
}

extern "C" __attribute__((visibility("default"))) void uvmpool_sim_set_capture_status(CUstream stream,
                                                                                      int status) {
  if (is_default_stream(stream)) return;
  if (status != CU_STREAM_CAPTURE_STATUS_NONE && status != CU_STREAM_CAPTURE_STATUS_ACTIVE &&
      status != CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return;
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  if (Stream* s = find_stream(o, stream)) s->capture = static_cast<CUstreamCaptureStatus>(status);
}
