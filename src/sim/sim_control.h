// Control API of the simulated driver (libcuda.so.1 built from src/sim): failure injection, call
// counts, held streams and capture status, for tests of code that sits on top of the driver. Not part
// of the real driver; a program that uses it must run against the simulated driver.
#pragma once

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

// Makes the `nth_call_from_now`-th call (1 = the next one) of a driver function return `cuda_error`
// (a CUresult) without doing anything. `function_symbol_or_base` is an exported symbol
// ("cuMemAlloc_v2", "cuMemcpyAsync_ptsz") or a base name ("cuMemAlloc"); a base name counts the calls
// of all its variants together (a name that is both, like "cuMemcpy", is taken as the base). Several
// armed failures count down independently. Returns 0, or -1 if the function is unknown or
// nth_call_from_now is 0.
int uvmpool_sim_fail(const char* function_symbol_or_base, unsigned nth_call_from_now, int cuda_error);

// Calls of a function since load or the last uvmpool_sim_reset_counts(), failed ones included. A base
// name sums all its variants (so "cuMemcpy" counts cuMemcpy and cuMemcpy_ptds); any other exported
// symbol counts only itself. Unknown names count 0.
unsigned long long uvmpool_sim_call_count(const char* function);

// Sets every call count to 0 (armed failures keep counting down).
void uvmpool_sim_reset_counts(void);

// Disarms every pending failure, those from UVMPOOL_SIM_FAIL included.
void uvmpool_sim_clear_failures(void);

// Makes the work of a created stream look unfinished (held != 0) or finished (held == 0), so that
// stream-ordered reuse can be tested. While held, cuStreamQuery answers CUDA_ERROR_NOT_READY, and an
// event recorded on the stream stays incomplete (cuEventQuery -> CUDA_ERROR_NOT_READY,
// cuEventElapsedTime -> CUDA_ERROR_NOT_READY) until the hold ends. The hold ends, completing every
// such event, on uvmpool_sim_hold_stream(stream, 0), or when something waits for it as on a GPU:
// cuStreamSynchronize of the stream, cuEventSynchronize of such an event, cuCtxSynchronize in the
// stream's context; these then return CUDA_SUCCESS. Destroying the stream (or its context) also ends
// it. Events recorded while not held complete at once. Only queries change: operations submitted to a
// held stream still take effect at once, and a stream that waits (cuStreamWaitEvent) for an
// incomplete event is not held. Default streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) and
// unknown handles are ignored.
void uvmpool_sim_hold_stream(CUstream stream, int held);

// Makes cuStreamIsCapturing (and _ptsz) on a created stream answer `status` (a CUstreamCaptureStatus)
// until set again or the stream is destroyed; a new stream answers CU_STREAM_CAPTURE_STATUS_NONE.
// Nothing else changes: no graph is built and every call on the stream works as without capture.
// Default streams, unknown handles and statuses other than NONE, ACTIVE and INVALIDATED are ignored.
void uvmpool_sim_set_capture_status(CUstream stream, int status);

#ifdef __cplusplus
}
#endif
