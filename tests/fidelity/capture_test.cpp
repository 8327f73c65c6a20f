// What a stream capture forbids, measured on an H200 (driver 580.159.04) and copied by the simulator
// (src/sim/timeline.h: unsafe_call, not_capturing, synchronize_context). uvmpool's own threads take
// the relaxed interaction mode because of the last test (src/driver/capture_mode.h); its prefetch and
// advice hooks let the driver answer first because of the first two (src/hooks/advice_hooks.cpp).
#include <optional>
#include <thread>

#include "fidelity.h"

namespace fidelity {
namespace {

class Capture : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_CU(CU(cuStreamCreate, &s, static_cast<unsigned>(CU_STREAM_NON_BLOCKING)));
  }
  void TearDown() override {
    if (s != nullptr) CU(cuStreamDestroy_v2, s);
    DriverTest::TearDown();
  }
  // What `call` answered inside a capture of `s` begun in `mode`, the capture's status after it, and
  // what ending the capture answered.
  struct Captured {
    CUresult call = CUDA_ERROR_UNKNOWN;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult end = CUDA_ERROR_UNKNOWN;
  };
  template <class Call>
  Captured captured(CUstreamCaptureMode mode, Call&& call) {
    Captured r;
    EXPECT_CU(CU(cuStreamBeginCapture_v2, s, mode));
    r.call = call();
    EXPECT_CU(CU(cuStreamIsCapturing, s, &r.status));
    CUgraph graph = nullptr;
    r.end = CU(cuStreamEndCapture, s, &graph);
    if (graph != nullptr) CU(cuGraphDestroy, graph);
    return r;
  }
  // A capture spoiled by the call: refused with UNSUPPORTED, then INVALIDATED, then ending it fails.
  static void expect_spoiled(const Captured& r) {
    EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, r.call);
    EXPECT_EQ(r.status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, r.end);
  }
  static void expect_intact(const Captured& r) {
    EXPECT_EQ(r.status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_CU(r.end);
  }

  CUstream s = nullptr;
};

constexpr CUstreamCaptureMode kModes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                          CU_STREAM_CAPTURE_MODE_RELAXED};

// Whatever the memory and the mode: the capture is checked before the range, the location or the
// size, so even a prefetch that would be refused for its arguments spoils it.
TEST_F(Capture, APrefetchOnACapturingStreamIsRefusedAndSpoilsTheCapture) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  const CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  for (const CUstreamCaptureMode mode : kModes) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    expect_spoiled(captured(mode, [&] { return CU(cuMemPrefetchAsync_v2, p, kMiB, device, 0u, s); }));
    expect_spoiled(captured(mode, [&] { return CU(cuMemPrefetchAsync_v2, p, std::size_t{0}, device, 0u, s); }));
  }
  // Not capturing: memory cuMemAllocManaged did not make is refused as such.
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuMemPrefetchAsync_v2, p, kMiB, device, 0u, s));
}

TEST_F(Capture, AdviceWhileTheThreadCapturesIsRefusedAndSpoilsTheCaptureUnlessRelaxed) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, kMiB));
  const CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  const auto advise = [&] { return CU(cuMemAdvise_v2, p, kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device); };
  expect_spoiled(captured(CU_STREAM_CAPTURE_MODE_GLOBAL, advise));
  expect_spoiled(captured(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, advise));
  const Captured relaxed = captured(CU_STREAM_CAPTURE_MODE_RELAXED, advise);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, relaxed.call) << "not managed memory";
  expect_intact(relaxed);
}

// In every mode, even relaxed, and from any thread, even one in the relaxed interaction mode: the
// context's capturing stream cannot be waited for. So the pool's wait before unmapping freed memory, a
// cuCtxSynchronize, is kept out of captures (src/pool/captures.h).
TEST_F(Capture, SynchronizingTheContextOfACapturingStreamIsRefusedInEveryMode) {
  const auto sync_elsewhere_relaxed = [&] {
    CUresult got = CUDA_ERROR_UNKNOWN;
    std::thread([&] {
      CU(cuCtxSetCurrent, ctx);
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      EXPECT_CU(CU(cuThreadExchangeStreamCaptureMode, &mode));
      got = CU(cuCtxSynchronize);
    }).join();
    return got;
  };
  for (const CUstreamCaptureMode mode : kModes) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    expect_spoiled(captured(mode, [&] { return CU(cuCtxSynchronize); }));
    expect_spoiled(captured(mode, sync_elsewhere_relaxed));
  }
}

// A program's own cuMemFree during a global capture is refused and spoils it, from the capturing
// thread or another in the default mode; another thread in the relaxed mode frees.
TEST_F(Capture, FreeingDuringAGlobalCaptureSpoilsItUnlessTheFreeingThreadIsRelaxed) {
  // Frees `p` inside a global capture, on another thread (in the relaxed mode or not) or this one;
  // memory a refused free left is freed once the capture is over.
  const auto free_inside = [&](std::optional<bool> elsewhere_relaxed) {
    CUdeviceptr p = 0;
    EXPECT_CU(CU(cuMemAlloc_v2, &p, kMiB));
    const Captured r = captured(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] {
      if (!elsewhere_relaxed) return CU(cuMemFree_v2, p);
      CUresult got = CUDA_ERROR_UNKNOWN;
      std::thread([&] {
        CU(cuCtxSetCurrent, ctx);
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        if (*elsewhere_relaxed) EXPECT_CU(CU(cuThreadExchangeStreamCaptureMode, &mode));
        got = CU(cuMemFree_v2, p);
      }).join();
      return got;
    });
    if (r.call != CUDA_SUCCESS) EXPECT_CU(CU(cuMemFree_v2, p));
    return r;
  };
  const Captured relaxed = free_inside(true);
  EXPECT_CU(relaxed.call);
  expect_intact(relaxed);
  expect_spoiled(free_inside(false));
  expect_spoiled(free_inside(std::nullopt));
}

// The reason uvmpool's threads take the relaxed interaction mode: in the default one, another
// thread's event query during a global capture is refused and spoils the capture.
TEST_F(Capture, AnotherThreadsQueryDuringAGlobalCaptureSpoilsItUnlessThatThreadIsRelaxed) {
  CUevent e = nullptr;
  ASSERT_CU(CU(cuEventCreate, &e, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING)));
  const auto query_elsewhere = [&](bool relaxed) {
    CUresult got = CUDA_ERROR_UNKNOWN;
    CUstreamCaptureMode was = CU_STREAM_CAPTURE_MODE_RELAXED;
    std::thread([&] {
      CU(cuCtxSetCurrent, ctx);
      if (relaxed) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        EXPECT_CU(CU(cuThreadExchangeStreamCaptureMode, &mode));
        was = mode;
      }
      got = CU(cuEventQuery, e);
    }).join();
    if (relaxed) EXPECT_EQ(was, CU_STREAM_CAPTURE_MODE_GLOBAL) << "a thread's mode starts global";
    return got;
  };
  expect_spoiled(captured(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return query_elsewhere(false); }));
  const Captured relaxed = captured(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return query_elsewhere(true); });
  EXPECT_CU(relaxed.call);
  expect_intact(relaxed);
  // Another thread's capture in thread-local mode forbids nothing here.
  const Captured local = captured(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, [&] { return query_elsewhere(false); });
  EXPECT_CU(local.call);
  expect_intact(local);
  EXPECT_CU(CU(cuEventDestroy_v2, e));
}

}  // namespace
}  // namespace fidelity
