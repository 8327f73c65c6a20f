// The stream controls of sim_control.h: uvmpool_sim_hold_stream (work that has not finished yet) and
// uvmpool_sim_set_capture_status (what cuStreamIsCapturing answers).
#include <atomic>
#include <thread>

#include "sim_test.h"

namespace simtest {
namespace {

using HeldStreams = SimTest;
using CaptureStatus = SimTest;

// The per-thread-default-stream variant (_ptsz) of a stream function, as cudart would get it.
template <typename Fn>
Fn* ptsz(const char* base) {
  void* pfn = nullptr;
  EXPECT_CU(cuGetProcAddress(base, &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  return reinterpret_cast<Fn*>(pfn);
}

TEST_F(HeldStreams, HeldStreamIsNotReadyUntilReleased) {
  CUstream stream = nullptr;
  CUevent before = nullptr, during = nullptr, after = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuEventCreate(&before, 0));
  ASSERT_CU(cuEventCreate(&during, 0));
  ASSERT_CU(cuEventCreate(&after, 0));
  ASSERT_CU(cuEventRecord(before, stream));
  uvmpool_sim_hold_stream(stream, 1);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(stream));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, ptsz<CUresult(CUstream)>("cuStreamQuery")(stream));
  ASSERT_CU(cuEventRecord(during, stream));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(during));
  EXPECT_CU(cuEventQuery(before));  // recorded before the hold: already complete
  float ms = 0;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, before, during));

  uvmpool_sim_hold_stream(stream, 0);
  EXPECT_CU(cuStreamQuery(stream));
  EXPECT_CU(cuEventQuery(during));
  EXPECT_CU(cuEventElapsedTime(&ms, before, during));
  ASSERT_CU(cuEventRecord(after, stream));
  EXPECT_CU(cuEventQuery(after));  // recorded after the release: complete at once
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(HeldStreams, EventSynchronizeFinishesTheHeldWork) {
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  uvmpool_sim_hold_stream(stream, 1);
  ASSERT_CU(cuEventRecord(event, stream));
  ASSERT_CU_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(event));
  EXPECT_CU(cuEventSynchronize(event));
  EXPECT_CU(cuEventQuery(event));
  EXPECT_CU(cuStreamQuery(stream));  // the hold is over
  ASSERT_CU(cuEventRecord(event, stream));
  EXPECT_CU(cuEventQuery(event));
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(HeldStreams, StreamSynchronizeFinishesTheHeldWork) {
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuEventCreate(&event, 0));
  for (bool per_thread : {false, true}) {
    uvmpool_sim_hold_stream(stream, 1);
    ASSERT_CU(cuEventRecord(event, stream));
    ASSERT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(stream));
    EXPECT_CU(per_thread ? ptsz<CUresult(CUstream)>("cuStreamSynchronize")(stream) : cuStreamSynchronize(stream));
    EXPECT_CU(cuStreamQuery(stream)) << per_thread;
    EXPECT_CU(cuEventQuery(event)) << per_thread;
  }
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(HeldStreams, CtxSynchronizeFinishesTheHeldStreamsOfItsContextOnly) {
  CUcontext other = nullptr;
  CUstream elsewhere = nullptr, a = nullptr, b = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, 0));  // current until popped
  ASSERT_CU(cuStreamCreate(&elsewhere, 0));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
  ASSERT_CU(cuStreamCreate(&a, 0));
  ASSERT_CU(cuStreamCreate(&b, 0));
  for (CUstream s : {elsewhere, a, b}) uvmpool_sim_hold_stream(s, 1);
  EXPECT_CU(cuCtxSynchronize());
  EXPECT_CU(cuStreamQuery(a));
  EXPECT_CU(cuStreamQuery(b));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(elsewhere));
  EXPECT_CU(cuCtxDestroy(other));
}

TEST_F(HeldStreams, ARecordOnAnotherStreamReplacesTheIncompleteOne) {
  CUstream held = nullptr, idle = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&held, 0));
  ASSERT_CU(cuStreamCreate(&idle, 0));
  ASSERT_CU(cuEventCreate(&event, 0));
  uvmpool_sim_hold_stream(held, 1);
  ASSERT_CU(cuEventRecord(event, held));
  ASSERT_CU_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(event));
  ASSERT_CU(cuEventRecord(event, idle));
  EXPECT_CU(cuEventQuery(event));
  // A wait for an incomplete event is accepted and does not hold the waiting stream.
  ASSERT_CU(cuEventRecord(event, held));
  EXPECT_CU(cuStreamWaitEvent(idle, event, 0));
  EXPECT_CU(cuStreamQuery(idle));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(held));
}

TEST_F(HeldStreams, ADestroyedStreamsHoldIsForgotten) {
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuEventCreate(&event, 0));
  ASSERT_CU(cuStreamCreate(&stream, 0));
  uvmpool_sim_hold_stream(stream, 1);
  ASSERT_CU(cuEventRecord(event, stream));
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_CU(cuEventQuery(event));  // the destroyed stream's work finished
  uvmpool_sim_hold_stream(stream, 1);  // a stale handle is ignored
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(stream));
  // New streams (the allocator may give one the old address) start out idle.
  for (int i = 0; i < 8; ++i) {
    CUstream fresh = nullptr;
    ASSERT_CU(cuStreamCreate(&fresh, 0));
    EXPECT_CU(cuStreamQuery(fresh)) << i;
    ASSERT_CU(cuEventRecord(event, fresh));
    EXPECT_CU(cuEventQuery(event)) << i;
    ASSERT_CU(cuStreamDestroy(fresh));
  }
}

TEST_F(HeldStreams, DefaultStreamsAreNotHeld) {
  CUevent event = nullptr;
  ASSERT_CU(cuEventCreate(&event, 0));
  for (CUstream s : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    uvmpool_sim_hold_stream(s, 1);
    EXPECT_CU(cuStreamQuery(s));
    ASSERT_CU(cuEventRecord(event, s));
    EXPECT_CU(cuEventQuery(event));
  }
}

// Only queries change: work submitted to a held stream still takes effect at once.
TEST_F(HeldStreams, WorkOnAHeldStreamStillHappens) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  uvmpool_sim_hold_stream(stream, 1);
  const std::size_t before = free_bytes();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, 4 * kMiB, stream));
  EXPECT_CU(cuMemsetD8Async(p, 0x5a, 4 * kMiB, stream));
  unsigned char byte = 0;
  EXPECT_CU(cuMemcpyDtoHAsync(&byte, p, 1, stream));
  EXPECT_EQ(byte, 0x5a);
  EXPECT_CU(cuMemFreeAsync(p, stream));
  EXPECT_EQ(free_bytes(), before);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(stream));
}

// Holds, releases, records and queries from several threads at once (run under TSan to mean much).
TEST_F(HeldStreams, ControlsAndQueriesMayRace) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    for (int i = 0; i < 2000; ++i) uvmpool_sim_hold_stream(stream, i % 2 == 0);
    stop = true;
  });
  std::thread user([&, context = ctx] {
    cuCtxSetCurrent(context);
    CUevent event = nullptr;
    if (cuEventCreate(&event, 0) != CUDA_SUCCESS) return;
    for (unsigned i = 0; !stop; ++i) {
      cuEventRecord(event, stream);
      const CUresult r = i % 2 == 0 ? cuEventQuery(event) : cuStreamQuery(stream);
      EXPECT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) << cu_name(r);
      if (i % 3 == 0) {
        EXPECT_CU(i % 2 == 0 ? cuEventSynchronize(event) : cuStreamSynchronize(stream));
      }
    }
    cuEventDestroy(event);
  });
  toggler.join();
  user.join();
  EXPECT_CU(cuStreamQuery(stream));  // the last toggle released it
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(CaptureStatus, RoundTripsThroughIsCapturingAndItsPtszVariant) {
  CUstream stream = nullptr, other = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuStreamCreate(&other, 0));
  auto is_capturing_ptsz = ptsz<CUresult(CUstream, CUstreamCaptureStatus*)>("cuStreamIsCapturing");
  for (CUstreamCaptureStatus set : {CU_STREAM_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_INVALIDATED,
                                    CU_STREAM_CAPTURE_STATUS_NONE}) {
    uvmpool_sim_set_capture_status(stream, set);
    CUstreamCaptureStatus got = CU_STREAM_CAPTURE_STATUS_ACTIVE, got_ptsz = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    ASSERT_CU(cuStreamIsCapturing(stream, &got));
    ASSERT_CU(is_capturing_ptsz(stream, &got_ptsz));
    EXPECT_EQ(got, set);
    EXPECT_EQ(got_ptsz, set);
    ASSERT_CU(cuStreamIsCapturing(other, &got));
    EXPECT_EQ(got, CU_STREAM_CAPTURE_STATUS_NONE);  // other streams are untouched
  }
  EXPECT_CU(cuStreamDestroy(stream));
  EXPECT_CU(cuStreamDestroy(other));
}

TEST_F(CaptureStatus, AllocationsOnACapturingStreamStillWork) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  uvmpool_sim_set_capture_status(stream, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, kMiB, stream));
  EXPECT_CU(cuMemFreeAsync(p, stream));
  EXPECT_CU(cuStreamQuery(stream));
  EXPECT_CU(cuStreamSynchronize(stream));
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(CaptureStatus, IsForgottenWithTheStreamAndIgnoredWhereItCannotApply) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  uvmpool_sim_set_capture_status(stream, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  uvmpool_sim_set_capture_status(stream, 7);  // no such status: ignored
  CUstreamCaptureStatus got = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(stream, &got));
  EXPECT_EQ(got, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamIsCapturing(stream, &got));
  uvmpool_sim_set_capture_status(stream, CU_STREAM_CAPTURE_STATUS_ACTIVE);  // stale handle: ignored
  for (int i = 0; i < 8; ++i) {
    CUstream fresh = nullptr;
    ASSERT_CU(cuStreamCreate(&fresh, 0));
    ASSERT_CU(cuStreamIsCapturing(fresh, &got));
    EXPECT_EQ(got, CU_STREAM_CAPTURE_STATUS_NONE) << i;
    ASSERT_CU(cuStreamDestroy(fresh));
  }
  for (CUstream s : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    uvmpool_sim_set_capture_status(s, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ASSERT_CU(cuStreamIsCapturing(s, &got));
    EXPECT_EQ(got, CU_STREAM_CAPTURE_STATUS_NONE);
  }
}

}  // namespace
}  // namespace simtest
