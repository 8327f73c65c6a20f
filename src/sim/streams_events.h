// Streams and events: the entry points (streams_events.cpp) over the virtual timeline (timeline.h).
#pragma once

#include "driver/driver_api.h"
#include "sim/contexts.h"

namespace uvmpool::sim {

// The context work on `stream` runs in: the current context for the default streams (0,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), the stream's own otherwise. CUDA_ERROR_INVALID_HANDLE for
// an unknown stream; the errors of current_context() for a default stream.
CUresult stream_context(CUstream stream, Context** out);

}  // namespace uvmpool::sim
