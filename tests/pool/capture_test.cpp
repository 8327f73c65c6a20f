// Streams that capture a graph (the simulator answers cuStreamIsCapturing as a test sets it with
// uvmpool_sim_set_capture_status). pool.h: "A capturing stream is not served (the caller passes the
// call to the driver)". FACTS.md: "an address baked into a captured graph must stay mapped".
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

}  // namespace
}  // namespace pooltest
