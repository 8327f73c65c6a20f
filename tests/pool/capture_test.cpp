// Streams that capture a graph (the simulator answers cuStreamIsCapturing as a test sets it with
// uvmpool_sim_set_capture_status). pool.h: "A capturing stream is not served (the caller passes the
// call to the driver)". FACTS.md: "an address baked into a captured graph must stay mapped".
#include <condition_variable>
#include <mutex>
#include <thread>

#include "pool_test.h"

namespace pooltest {
namespace {

class Capture : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    REQUIRE_SIM_CONTROL(set_capture_status, "uvmpool_sim_set_capture_status");
    ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    if (s != nullptr) drv().cuStreamDestroy_v2(s);
    PoolTest::TearDown();
  }
  CUstream s = nullptr;
};

TEST_F(Capture, CapturingFollowsTheStreamsCaptureStatus) {
  auto pool = make_pool();
  EXPECT_FALSE(pool->capturing(s));
  EXPECT_FALSE(pool->capturing(nullptr));
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_TRUE(pool->capturing(s));
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_FALSE(pool->capturing(s));
}

TEST_F(Capture, AllocateAsyncOnACapturingStreamIsNotServedByThePool) {
  auto pool = make_pool();
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (std::size_t bytes : {std::size_t{256}, 3 * gran}) {
    const DeviceStats before = pool->stats(0);
    CUdeviceptr p = 0;
    const CUresult r = pool->allocate_async(&p, bytes, s);
    if (r == CUDA_SUCCESS) {
      EXPECT_FALSE(pool->find(p).has_value()) << "the pool served an allocation on a capturing stream";
      drv().cuMemFreeAsync(p, s);
    }
    EXPECT_EQ(pool->stats(0).live_allocations, before.live_allocations) << bytes << " bytes";
    EXPECT_EQ(pool->stats(0).live_bytes, before.live_bytes) << bytes << " bytes";
  }
  // Once capture ends, the stream is served again.
  set_capture_status(s, CU_STREAM_CAPTURE_STATUS_NONE);
  CUdeviceptr p = 0;
  ASSERT_CU(pool->allocate_async(&p, 1000, s));
  EXPECT_TRUE(pool->find(p).has_value());
  must_free(*pool, p);
}

TEST_F(Capture, MemoryFreedWhileCapturingIsNeverReusedAndStaysMapped) {
  auto pool = make_pool();
  CUstream other = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  for (std::size_t bytes : {std::size_t{512}, 2 * gran}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    CUdeviceptr p = must_allocate(*pool, bytes);
    set_capture_status(s, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool->deallocate_async(p, s, &r), Ownership::Ours);
    EXPECT_CU(r);
    set_capture_status(s, CU_STREAM_CAPTURE_STATUS_NONE);
    ASSERT_CU(drv().cuStreamSynchronize(s));
    // The graph may run later and use p: nothing else may get it, and it must stay mapped.
    std::vector<CUdeviceptr> got;
    for (int i = 0; i < 50; ++i) {
      CUdeviceptr q = 0;
      ASSERT_CU(pool->allocate_async(&q, bytes, i % 2 ? other : s));
      got.push_back(q);
      EXPECT_TRUE(disjoint({{p, bytes}, {q, bytes}})) << "memory freed in a capture was reused";
    }
    for (CUdeviceptr q : got) must_free(*pool, q);
    pool->release_idle();
    std::vector<unsigned char> data(bytes, 0xAB);
    EXPECT_CU(drv().cuMemcpyHtoD_v2(p, data.data(), bytes)) << " (memory freed in a capture was unmapped)";
  }
  EXPECT_CU(drv().cuStreamDestroy_v2(other));
}

// The driver refuses cuCtxSynchronize while a stream of the context captures, spoiling the capture
// (tests/fidelity/capture_test.cpp), and the pool's wait before an unmap is that call: what was freed
// is waited for as a capture begins, and what is freed during it is held until it is over
// (src/pool/captures.h, held_frees.h; tests/pool/capture_free_test.cpp), its wait made after it.
class CaptureWaits : public Capture {
 protected:
  CUstreamCaptureStatus status_of(CUstream stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_CU(drv().cuStreamIsCapturing(stream, &status));
    return status;
  }
  // A block of three chunks allocated and freed at once: its unmap needs a wait.
  void free_one(Pool& pool) { must_free(pool, must_allocate(pool, 3 * gran)); }
  unsigned long long syncs() { return sim().call_count("cuCtxSynchronize"); }
};

TEST_F(CaptureWaits, WhatIsFreedBeforeACaptureIsWaitedForAsItBeginsAndWhatDuringItAfterIt) {
  auto pool = make_pool();
  free_one(*pool);
  ASSERT_TRUE(pool->fence_due());
  sim().reset_counts();
  ASSERT_CU(begin_capture(*pool, s));
  EXPECT_EQ(syncs(), 1u) << "what was freed before the capture is waited for as it begins";
  EXPECT_FALSE(pool->fence_due());
  free_one(*pool);  // a program capturing in relaxed mode may free
  pool->release_idle();
  EXPECT_EQ(syncs(), 1u) << "the pool waited for the context during its capture";
  EXPECT_EQ(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_FALSE(pool->fence_due()) << "the free is held: no wait is due for it yet";
  EXPECT_CU(end_capture(*pool, s));
  EXPECT_TRUE(pool->fence_due()) << "made at the capture's end, the free leaves its wait due";
  pool->fence_freed();
  EXPECT_EQ(syncs(), 2u);
  EXPECT_FALSE(pool->fence_due());
}

// Its end not told (the program ended it by a route not hooked): the driver, asked at the next wait,
// says it is over, and the wait is made.
TEST_F(CaptureWaits, ACaptureWhoseEndThePoolWasNotToldOfIsForgottenAtTheNextWait) {
  auto pool = make_pool();
  ASSERT_CU(begin_capture(*pool, s));
  CUgraph graph = nullptr;  // ended without the pool's knowing
  EXPECT_CU(drv().cuStreamEndCapture(s, &graph));
  if (graph != nullptr) drv().cuGraphDestroy(graph);
  free_one(*pool);
  sim().reset_counts();
  pool->fence_freed();
  EXPECT_EQ(syncs(), 1u);
  EXPECT_FALSE(pool->fence_due());
}

// A begin the driver refused leaves nothing under way.
TEST_F(CaptureWaits, ARefusedBeginLeavesNoCaptureUnderWay) {
  auto pool = make_pool();
  pool->capture_beginning(s);
  pool->capture_begun(s, CUDA_ERROR_INVALID_VALUE);
  free_one(*pool);
  sim().reset_counts();
  pool->fence_freed();
  EXPECT_EQ(syncs(), 1u);
}

// Another thread's per-thread default stream cannot be asked about from here: its capture counts as
// under way until that thread ends it and says so.
TEST_F(CaptureWaits, AnotherThreadsPerThreadStreamCaptureIsUnderWayUntilItsThreadEndsIt) {
  auto pool = make_pool();
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  std::mutex m;
  std::condition_variable cv;
  int stage = 0;  // 1: capturing; 2: the test has fenced; 3: ended
  std::thread capturer([&] {
    drv().cuCtxSetCurrent(context);
    pool->capture_beginning(CU_STREAM_PER_THREAD);
    const CUresult began = drv().cuStreamBeginCapture_v2_ptsz(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED);
    pool->capture_begun(CU_STREAM_PER_THREAD, began);
    EXPECT_CU(began);
    std::unique_lock lock(m);
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_CU(drv().cuStreamIsCapturing_ptsz(CU_STREAM_PER_THREAD, &status));
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph graph = nullptr;
    EXPECT_CU(drv().cuStreamEndCapture_ptsz(CU_STREAM_PER_THREAD, &graph));
    if (graph != nullptr) drv().cuGraphDestroy(graph);
    pool->capture_ended(CU_STREAM_PER_THREAD);
    stage = 3;
    cv.notify_all();
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return stage == 1; });
  }
  free_one(*pool);
  sim().reset_counts();
  pool->fence_freed();
  EXPECT_EQ(syncs(), 0u) << "waited while another thread's per-thread stream captured";
  {
    std::unique_lock lock(m);
    stage = 2;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 3; });
  }
  capturer.join();
  pool->fence_freed();
  EXPECT_EQ(syncs(), 1u);
}

}  // namespace
}  // namespace pooltest
