// The stream capture interaction mode of uvmpool's own threads (the tiering mover's, the host tier's,
// the CUDA IPC server's). Measured on an H200 (driver 580, tests/fidelity/capture_test.cpp): while a
// program thread captures a graph in global mode, PyTorch's default, any other thread in the default
// (global) interaction mode that calls cuEventQuery, cuEventSynchronize, cuStreamQuery,
// cuStreamSynchronize, cuMemAlloc, cuMemFree or a pinned host allocation gets
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the program's capture is invalidated. In relaxed mode
// those calls run and the capture stands. (cuCtxSynchronize is refused in every mode while a stream of
// the context captures, from any thread: the pool keeps its own out of captures, src/pool/captures.h.)
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::driver {

// Called first on each thread uvmpool starts that calls the driver.
inline void relax_capture_mode(const Table& d) {
  if (d.cuThreadExchangeStreamCaptureMode == nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  d.cuThreadExchangeStreamCaptureMode(&mode);
}

// For uvmpool's own queries made on a program thread (an event of the pool's, inside an allocation
// hook): relaxed for the scope, the thread's mode given back after, so that another thread's global
// capture is not spoiled by a call the program did not make. Two calls on thread-local state; used
// on slow paths only.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(const Table& d) : d_(d) {
    if (d_.cuThreadExchangeStreamCaptureMode != nullptr)
      exchanged_ = d_.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCapture() {
    if (exchanged_) d_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  const Table& d_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;  // the thread's own while exchanged
  bool exchanged_ = false;
};

}  // namespace uvmpool::driver
