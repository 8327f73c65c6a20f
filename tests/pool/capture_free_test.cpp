// Memory freed during a graph capture in its context (src/pool/held_frees.h). The pool's free does
// not wait for the device; its wait comes before freed memory is unmapped, and during a capture in that
// context the driver refuses that wait (tests/fidelity/capture_test.cpp). Work queued before the
// capture on another stream may still use the memory, so the free is held until the capture is over:
// here that work is a kernel still running (in virtual time) when the pool is told to give its idle
// memory back, and the simulator's race detector counts any unmap under it.
#include <thread>

#include "pool_test.h"
// After the driver's headers, which include cuda.h their own way (sim_control.h includes it plainly).
#include "sim/sim_control.h"

namespace pooltest {
namespace {

class CaptureFrees : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(drv().cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE));
    ASSERT_CU(drv().cuModuleGetFunction(&fill_u32, module, "uvmpool_fill_u32"));
    violations = reinterpret_cast<unsigned long long (*)()>(uvmpool::driver::real_symbol("uvmpool_sim_violations"));
    ASSERT_NE(violations, nullptr) << "the simulated driver has no uvmpool_sim_violations";
    ASSERT_CU(drv().cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(drv().cuStreamCreate(&working, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    drv().cuCtxSynchronize();
    if (capturing != nullptr) drv().cuStreamDestroy_v2(capturing);
    if (working != nullptr) drv().cuStreamDestroy_v2(working);
    if (module != nullptr) drv().cuModuleUnload(module);
    PoolTest::TearDown();
  }

  // uvmpool_fill_u32(dst, count, value) on `stream`: dst[i] = value for i < count.
  CUresult fill_words(CUdeviceptr dst, std::uint64_t count, std::uint32_t value, CUstream stream) {
    void* params[] = {&dst, &count, &value};
    return drv().cuLaunchKernel(fill_u32, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }
  // Work on `working` that uses [p, p + bytes) late: behind a 256 MiB fill of `ballast` (about 64 us
  // of modeled work), so it is still to run when the test's next calls are made.
  void use_late(Pool& pool, CUdeviceptr p, std::size_t bytes) {
    if (ballast == 0) ballast = must_allocate(pool, 256 * kMiB);
    ASSERT_CU(fill_words(ballast, 64 * kMiB, 1, working));
    ASSERT_CU(fill_words(p, bytes / 4, 2, working));
  }
  // Held frees are no allocation to find() (freed, to the program), but their memory stays live.
  static std::uint64_t live(const Pool& pool) { return pool.stats(0).live_allocations; }
  CUresult free_of(Pool& pool, CUdeviceptr p) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool.deallocate(p, &r), Ownership::Ours);
    return r;
  }

  CUmodule module = nullptr;
  CUfunction fill_u32 = nullptr;
  unsigned long long (*violations)() = nullptr;
  CUstream capturing = nullptr, working = nullptr;
  CUdeviceptr ballast = 0;
};

// A slot of a slab (which the free would empty), a stitched mapping, a carved allocation.
const std::size_t kSizes[] = {512, 6 * kMiB, 40 * kMiB};

TEST_F(CaptureFrees, AFreeDuringACaptureIsHeldSoWorkQueuedBeforeItNeverRunsOnUnmappedMemory) {
  for (const std::size_t bytes : kSizes) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    ballast = 0;
    const unsigned long long before = violations();
    const CUdeviceptr p = must_allocate(*pool, bytes);
    use_late(*pool, p, bytes);
    const std::uint64_t live = pool->stats(0).live_allocations;
    ASSERT_CU(begin_capture(*pool, capturing));
    EXPECT_CU(free_of(*pool, p)) << "a relaxed capture may free";
    EXPECT_FALSE(pool->find(p).has_value()) << "to the program, freed at once, as the driver's free";
    EXPECT_FALSE(pool->chunks_of(p).has_value());
    EXPECT_EQ(pool->stats(0).live_allocations, live) << "held: its memory kept until the capture is over";
    pool->release_idle();  // what is idle goes back to the driver: nothing of p's
    EXPECT_EQ(violations(), before) << "memory freed during the capture was unmapped under the work queued before it";
    EXPECT_CU(end_capture(*pool, capturing));
    EXPECT_EQ(pool->stats(0).live_allocations, live - 1) << "freed once the capture is over";
    pool->release_idle();  // now with the wait for the work first
    EXPECT_EQ(violations(), before);
    must_free(*pool, ballast);
    ASSERT_CU(drv().cuCtxSynchronize());
  }
}

TEST_F(CaptureFrees, ASecondFreeOfAHeldPointerIsADoubleFree) {
  auto pool = make_pool();
  const CUdeviceptr p = must_allocate(*pool, 6 * kMiB);
  const CUdeviceptr q = must_allocate(*pool, 6 * kMiB);
  ASSERT_CU(begin_capture(*pool, capturing));
  EXPECT_CU(free_of(*pool, p));
  ASSERT_EQ(live(*pool), 2u) << "held";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, free_of(*pool, p));
  CUresult r = CUDA_SUCCESS;
  EXPECT_EQ(pool->deallocate_async(p, working, &r), Ownership::Ours);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "stream-ordered";
  EXPECT_EQ(live(*pool), 2u) << "still held: neither double free freed it";
  EXPECT_CU(end_capture(*pool, capturing));
  EXPECT_FALSE(pool->find(p).has_value());
  EXPECT_TRUE(pool->find(q).has_value()) << "the double frees freed nothing else";
  EXPECT_EQ(pool->stats(0).live_allocations, 1u);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, free_of(*pool, p)) << "and after the capture, it is freed once";
  must_free(*pool, q);
}

// Guard mode unmaps at every free, after waiting for the context: its frees are held too, the
// stream-ordered ones on a stream not capturing as well.
TEST_F(CaptureFrees, GuardModesFreesDuringACaptureAreHeldBothKinds) {
  PoolConfig config = test_config();
  config.guard = true;
  auto pool = make_pool(config);
  const unsigned long long before = violations();
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "cuMemFreeAsync" : "cuMemFree");
    const CUdeviceptr p = must_allocate(*pool, 6 * kMiB);
    use_late(*pool, p, 6 * kMiB);
    ASSERT_CU(begin_capture(*pool, capturing));
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (async) {
      EXPECT_EQ(pool->deallocate_async(p, working, &r), Ownership::Ours);
    } else {
      r = free_of(*pool, p);
    }
    EXPECT_CU(r);
    EXPECT_EQ(live(*pool), 2u) << "held (p and the ballast)";
    EXPECT_FALSE(pool->find(p).has_value()) << "freed, to the program";
    EXPECT_EQ(violations(), before) << "a guard mapping was unmapped during the capture under unfinished work";
    EXPECT_CU(end_capture(*pool, capturing));
    EXPECT_EQ(live(*pool), 1u);
    EXPECT_EQ(violations(), before) << "and at its end, the wait was not made first";
    ASSERT_CU(drv().cuCtxSynchronize());
  }
  must_free(*pool, ballast);
}

// From the moment a capture is being begun, another thread's free is held: a free between the begin's
// own wait and the driver's begin would otherwise be waited for by no one.
TEST_F(CaptureFrees, AnotherThreadsFreeWhileACaptureIsBeingBegunIsHeld) {
  auto pool = make_pool();
  const CUdeviceptr p = must_allocate(*pool, 6 * kMiB);
  pool->capture_beginning(capturing);
  std::thread other([&] {
    drv().cuCtxSetCurrent(ctx);
    EXPECT_CU(free_of(*pool, p));
  });
  other.join();
  EXPECT_EQ(live(*pool), 1u) << "not held";
  EXPECT_FALSE(pool->fence_due()) << "held, it left no wait due";
  // The driver refuses the begin: no capture, and the next call into the pool makes the free.
  pool->capture_begun(capturing, CUDA_ERROR_INVALID_VALUE);
  const CUdeviceptr q = must_allocate(*pool, 4096);
  EXPECT_EQ(live(*pool), 1u) << "a capture that never began still holds the free";
  must_free(*pool, q);
}

// A capture whose end the hooks did not see (ended through a route not hooked): the driver, asked at
// the next free, says it is over, and the held frees are made.
TEST_F(CaptureFrees, HeldFreesAreMadeAtTheNextFreeOnceTheDriverSaysTheCaptureIsOver) {
  auto pool = make_pool();
  const CUdeviceptr p = must_allocate(*pool, 6 * kMiB);
  const CUdeviceptr q = must_allocate(*pool, 512);
  ASSERT_CU(begin_capture(*pool, capturing));
  EXPECT_CU(free_of(*pool, p));
  CUgraph graph = nullptr;
  ASSERT_CU(drv().cuStreamEndCapture(capturing, &graph));  // the pool not told
  if (graph != nullptr) drv().cuGraphDestroy(graph);
  EXPECT_EQ(live(*pool), 2u) << "held";
  must_free(*pool, q);
  EXPECT_EQ(live(*pool), 0u);
}

// A context destroyed during its capture takes the capture with it: its held frees are made first.
TEST_F(CaptureFrees, AContextBeingDestroyedHasItsHeldFreesMade) {
  auto pool = make_pool();
  const CUdeviceptr p = must_allocate(*pool, 6 * kMiB);
  ASSERT_CU(begin_capture(*pool, capturing));
  EXPECT_CU(free_of(*pool, p));
  ASSERT_EQ(live(*pool), 1u) << "held";
  pool->context_destroying(ctx);
  EXPECT_EQ(live(*pool), 0u);
  end_capture(*pool, capturing);  // spoiled by the wait made before the destruction, which ends it anyway
}

}  // namespace
}  // namespace pooltest
