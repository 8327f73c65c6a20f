// Makes a context current on the calling thread for a scope, when it is not already, and restores
// the previous one after. Used where uvmpool works on a context the thread may not have current:
// the pool's waits on freeing streams, the tiering mover's fences and holds on the program's streams.
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::driver {

class ContextScope {
 public:
  // A null `context` leaves the current one as it is.
  ContextScope(const Table& d, CUcontext context) : d_(d) {
    CUcontext current = nullptr;
    if (context == nullptr || (d_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context)) return;
    status_ = d_.cuCtxPushCurrent_v2(context);
    pushed_ = status_ == CUDA_SUCCESS;
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) d_.cuCtxPopCurrent_v2(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  // CUDA_SUCCESS, or why the context could not be made current (it is gone, for one).
  CUresult status() const { return status_; }

 private:
  const Table& d_;
  CUresult status_ = CUDA_SUCCESS;
  bool pushed_ = false;
};

// Whether `stream` is one the program created, with a context of its own (not 0, CU_STREAM_LEGACY or
// CU_STREAM_PER_THREAD, which name the current context's default streams).
inline bool has_own_context(CUstream stream) {
  return stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
}

// The context `stream`'s work runs in (an event recorded on it must be made there): its own, or the
// current one for a default stream. The driver's error for a stream it does not know.
inline CUresult stream_context(const Table& d, CUstream stream, CUcontext* context) {
  if (has_own_context(stream) && d.cuStreamGetCtx != nullptr) return d.cuStreamGetCtx(stream, context);
  return d.cuCtxGetCurrent(context);
}

}  // namespace uvmpool::driver
