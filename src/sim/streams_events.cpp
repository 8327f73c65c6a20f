// Streams and events. Work on streams has virtual time (timeline.h): a stream is busy until the end of
// its last work by the calling thread's host clock, and an event completes when the clock reaches the
// time its stream reached it. Two test controls (sim_control.h) force what queries answer:
// - uvmpool_sim_hold_stream: a held created stream answers CUDA_ERROR_NOT_READY, and events recorded
//   on it stay incomplete until the hold ends (release, a synchronize that waits for it, or the
//   stream's destruction), whatever the clock says. Holds do not spread: a stream that
//   cuStreamWaitEvent's an incomplete event is not held, and default streams cannot be held.
// - uvmpool_sim_set_capture_status: what cuStreamIsCapturing answers for a created stream (NONE by
//   default, always NONE for default streams). Nothing else looks at it.
#include "sim/streams_events.h"

#include "sim/entry_points.h"
#include "sim/sim_control.h"
#include "sim/timeline.h"

namespace uvmpool::sim {

constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

CUresult stream_context(CUstream stream, Context** out) { return timeline::stream_context(stream, kLegacy, out); }

CUresult impl::cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return timeline::create_stream(phStream, Flags, 0);
}
CUresult impl::cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return timeline::create_stream(phStream, flags, priority);
}
CUresult impl::cuStreamDestroy_v2(CUstream hStream) { return timeline::destroy_stream(hStream); }

CUresult impl::cuStreamSynchronize(CUstream s) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::synchronize_stream(s, kLegacy);
}
CUresult impl::cuStreamSynchronize_ptsz(CUstream s) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::synchronize_stream(s, kPerThread);
}
CUresult impl::cuStreamQuery(CUstream s) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::query_stream(s, kLegacy);
}
CUresult impl::cuStreamQuery_ptsz(CUstream s) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::query_stream(s, kPerThread);
}

CUresult impl::cuStreamWaitEvent(CUstream s, CUevent e, unsigned int Flags) {
  if ((Flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return timeline::wait_event(s, kLegacy, e);
}
CUresult impl::cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int Flags) {
  if ((Flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return timeline::wait_event(s, kPerThread, e);
}

// The legacy and per-thread handles name the current context's streams.
CUresult impl::cuStreamGetCtx(CUstream s, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = timeline::stream_context(s, kLegacy, &context); status != CUDA_SUCCESS) return status;
  *pctx = to_handle(context);
  return CUDA_SUCCESS;
}

CUresult impl::cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  return timeline::capture_status(s, kLegacy, status);
}
CUresult impl::cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return timeline::capture_status(s, kPerThread, status);
}

CUresult impl::cuEventCreate(CUevent* phEvent, unsigned int Flags) { return timeline::create_event(phEvent, Flags); }
CUresult impl::cuEventDestroy_v2(CUevent e) { return timeline::destroy_event(e); }
CUresult impl::cuEventRecord(CUevent e, CUstream s) { return timeline::record_event(e, s, kLegacy); }
CUresult impl::cuEventRecord_ptsz(CUevent e, CUstream s) { return timeline::record_event(e, s, kPerThread); }
CUresult impl::cuEventQuery(CUevent e) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::query_event(e);
}
CUresult impl::cuEventSynchronize(CUevent e) {
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::synchronize_event(e);
}
CUresult impl::cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return timeline::elapsed_time(ms, start, end);
}

}  // namespace uvmpool::sim

using namespace uvmpool::sim;

extern "C" __attribute__((visibility("default"))) void uvmpool_sim_hold_stream(CUstream stream, int held) {
  timeline::hold_stream(stream, held != 0);
}

extern "C" __attribute__((visibility("default"))) void uvmpool_sim_set_capture_status(CUstream stream,
                                                                                      int status) {
  if (status != CU_STREAM_CAPTURE_STATUS_NONE && status != CU_STREAM_CAPTURE_STATUS_ACTIVE &&
      status != CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return;
  timeline::set_capture_status(stream, static_cast<CUstreamCaptureStatus>(status));
}
