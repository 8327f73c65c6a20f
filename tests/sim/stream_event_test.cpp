// Streams and events: work is done at submission, so streams are idle and events complete (unless a
// test holds a stream: stream_controls_test.cpp); handles, flags and timestamps behave as the API says.
#include <chrono>
#include <thread>

#include "sim_test.h"

namespace simtest {
namespace {

using Streams = SimTest;
using Events = SimTest;

TEST_F(Streams, CreatedStreamIsAlwaysIdleAndDestroyable) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  EXPECT_CU(cuStreamQuery(stream));
  EXPECT_CU(cuStreamSynchronize(stream));
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy(stream));
}

TEST_F(Streams, DefaultStreamHandlesAreAccepted) {
  for (CUstream s : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    EXPECT_CU(cuStreamQuery(s));
    EXPECT_CU(cuStreamSynchronize(s));
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    EXPECT_CU(cuStreamIsCapturing(s, &status));
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  }
}

TEST_F(Streams, UnknownFlagsAreInvalidValueAndPrioritiesAreAccepted) {
  CUstream stream = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&stream, 0x8));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(nullptr, 0));
  ASSERT_CU(cuStreamCreateWithPriority(&stream, 0, -100));  // clamped, like the real driver
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(Streams, CaptureIsNeverActive) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ASSERT_CU(cuStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(Streams, WaitOnAnEventIsAcceptedAndUnknownEventsAreInvalidHandle) {
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(event, nullptr));
  EXPECT_CU(cuStreamWaitEvent(stream, event, 0));
  ASSERT_CU(cuEventDestroy(event));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamWaitEvent(stream, event, 0));
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(Streams, DestroyingTheContextDestroysItsStreams) {
  CUcontext created = nullptr;
  CUstream stream = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, 0));
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuCtxDestroy(created));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(stream));
}

TEST_F(Events, ElapsedTimeIsTheTimeBetweenTheRecords) {
  CUevent start = nullptr, end = nullptr;
  ASSERT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&end, CU_EVENT_BLOCKING_SYNC));
  ASSERT_CU(cuEventRecord(start, nullptr));
  uvmpool_sim_advance_host_ns(20'000'000);  // host work between the records, on the virtual clock
  ASSERT_CU(cuEventRecord(end, CU_STREAM_PER_THREAD));
  EXPECT_CU(cuEventQuery(end));
  EXPECT_CU(cuEventSynchronize(end));
  float ms = 0;
  ASSERT_CU(cuEventElapsedTime(&ms, start, end));
  EXPECT_NEAR(ms, 20.0f + kCallNs / 1e6f, 1e-4f);
  EXPECT_CU(cuEventDestroy(start));
  EXPECT_CU(cuEventDestroy(end));
}

TEST_F(Events, ElapsedTimeNeedsTwoRecordedTimingEvents) {
  CUevent timed = nullptr, untimed = nullptr, never = nullptr;
  ASSERT_CU(cuEventCreate(&timed, 0));
  ASSERT_CU(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&never, 0));
  ASSERT_CU(cuEventRecord(timed, nullptr));
  ASSERT_CU(cuEventRecord(untimed, nullptr));
  float ms = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, timed, never));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, timed, untimed));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuEventElapsedTime(nullptr, timed, timed));
  EXPECT_CU(cuEventQuery(never));  // never recorded: complete
}

TEST_F(Events, DestroyedOrUnknownEventIsInvalidHandle) {
  CUevent event = nullptr;
  ASSERT_CU(cuEventCreate(&event, 0));
  ASSERT_CU(cuEventDestroy(event));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(event, nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventQuery(event));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventDestroy(event));
}

TEST_F(Events, InterprocessEventsMustDisableTiming) {
  CUevent event = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&event, CU_EVENT_INTERPROCESS));
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  EXPECT_CU(cuEventDestroy(event));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&event, 0x40));
}

TEST_F(Events, RecordOnAnUnknownStreamIsInvalidHandle) {
  CUevent event = nullptr;
  CUstream stream = nullptr;
  ASSERT_CU(cuEventCreate(&event, 0));
  ASSERT_CU(cuStreamCreate(&stream, 0));
  ASSERT_CU(cuStreamDestroy(stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(event, stream));
}

}  // namespace
}  // namespace simtest
