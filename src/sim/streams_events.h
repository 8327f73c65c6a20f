// Streams and events. All work is done at submission, so streams are idle and events complete when
// recorded, except where a test holds a stream (uvmpool_sim_hold_stream); what is kept is what the
// API can observe: handles, flags, timestamps, holds and the capture status a test set.
#pragma once

#include "driver/driver_api.h"
#include "sim/contexts.h"

namespace uvmpool::sim {

// The context work on `stream` runs in: the current context for the default streams (0,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), the stream's own otherwise. CUDA_ERROR_INVALID_HANDLE for
// an unknown stream; the errors of current_context() for a default stream.
CUresult stream_context(CUstream stream, Context** out);

// Finishes the held work of every stream of `context` (cuCtxSynchronize waits for all of it).
void finish_context_work(const Context* context);

// Destroys the streams and events created in `context` (when it is destroyed).
void release_context_streams_events(const Context* context);

}  // namespace uvmpool::sim
