// Stream-ordered reuse (pool.h: "memory freed on a stream is reused at once on that stream, on
// others only once the freeing stream's work has completed"). The simulator holds a stream's work
// back on request (uvmpool_sim_hold_stream): while held, its events are NOT_READY; waiting for them
// (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize) completes them, as on a GPU.
//
// A pool may either pick other memory or wait for the freeing stream before reusing its memory
// elsewhere; both are correct. What is checked: memory freed on a held stream is never handed to
// another stream (or a synchronous allocation) unless the pool waited for it (a wait call was made).
#include <condition_variable>
#include <mutex>
#include <thread>

#include "pool_test.h"

namespace pooltest {
namespace {

class StreamOrder : public PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    REQUIRE_SIM_CONTROL(hold_stream, "uvmpool_sim_hold_stream");
    ASSERT_CU(drv().cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(drv().cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    for (CUstream s : {a, b})
      if (s != nullptr) {
        hold_stream(s, false);
        drv().cuStreamDestroy_v2(s);
      }
    PoolTest::TearDown();
  }

  CUdeviceptr alloc_on(Pool& pool, std::size_t bytes, CUstream s) {
    CUdeviceptr p = 0;
    EXPECT_CU(pool.allocate_async(&p, bytes, s)) << " (" << bytes << " bytes)";
    return p;
  }
  void free_on(Pool& pool, CUdeviceptr p, CUstream s) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_EQ(pool.deallocate_async(p, s, &r), Ownership::Ours);
    EXPECT_CU(r);
  }

  std::vector<std::size_t> sizes() const { return {256, 5000, 100000, gran, 3 * gran + 1}; }

  CUstream a = nullptr;
  CUstream b = nullptr;
};

TEST_F(StreamOrder, FreedOnAHeldStreamIsReusedAtOnceOnThatStream) {
  for (std::size_t bytes : {gran, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    const unsigned long long vmm = vmm_build_calls();
    const unsigned long long waits = wait_calls();
    CUdeviceptr q = alloc_on(*pool, bytes, a);
    EXPECT_EQ(q, p) << "the same stream may reuse its own freed memory at once";
    EXPECT_EQ(vmm_build_calls(), vmm) << "reuse on the same stream needs no new mapping";
    EXPECT_EQ(wait_calls(), waits) << "reuse on the same stream needs no wait";
    hold_stream(a, false);
    free_on(*pool, q, a);
  }
}

// Issue 17 (item 11): memory freed on a stream that the program then destroys. The cuStreamDestroy
// hook calls stream_destroying first, so the pending frees get their event on that stream while its
// handle still names it (before, the event was recorded later on a handle the driver may have given
// to a new stream, whose event could complete before the old stream's work).
TEST_F(StreamOrder, DestroyingAStreamCoversItsPendingFreesWithAnEventOnIt) {
  using Violations = unsigned long long (*)();
  auto violations = reinterpret_cast<Violations>(uvmpool::driver::real_symbol("uvmpool_sim_violations"));
  ASSERT_NE(violations, nullptr) << "the simulated driver has no uvmpool_sim_violations";
  for (std::size_t bytes : {std::size_t{5000}, gran, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUstream c = nullptr;
    ASSERT_CU(drv().cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = alloc_on(*pool, bytes, c);
    hold_stream(c, true);
    ASSERT_CU(drv().cuMemsetD8Async(p, 7, bytes, c));  // work in flight on the freed memory
    free_on(*pool, p, c);
    const unsigned long long records = sim().call_count("cuEventRecord");
    const unsigned long long waits = wait_calls();
    pool->stream_destroying(c);
    EXPECT_EQ(sim().call_count("cuEventRecord"), records + 1) << "no event recorded on the stream before it went";
    EXPECT_EQ(wait_calls(), waits) << "an event is enough: no wait for the whole context";
    // Another stream does not get the memory while the destroyed stream's work is held.
    CUdeviceptr q = alloc_on(*pool, bytes, b);
    EXPECT_TRUE(disjoint({{p, bytes}, {q, bytes}}) || wait_calls() > waits)
        << "memory freed on a destroyed stream with work in flight was reused without waiting";
    hold_stream(c, false);
    ASSERT_CU(drv().cuStreamDestroy_v2(c));
    ASSERT_CU(drv().cuCtxSynchronize());
    free_on(*pool, q, b);
    EXPECT_EQ(violations(), 0u);
  }
}

TEST_F(StreamOrder, FreedOnAHeldStreamIsNotReusedOnAnotherStream) {
  for (std::size_t bytes : sizes()) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    const unsigned long long waits = wait_calls();
    std::vector<Block> got;
    for (int i = 0; i < 20; ++i) {
      CUdeviceptr q = alloc_on(*pool, bytes, b);
      got.push_back({q, bytes});
      if (!disjoint({{p, bytes}, {q, bytes}})) {
        EXPECT_GT(wait_calls(), waits) << "memory freed on held stream A was handed to stream B (allocation " << i
                                       << ") without waiting for A";
        break;
      }
    }
    hold_stream(a, false);
    for (const Block& x : got) free_on(*pool, x.p, b);
  }
}

// The freeing stream then begins a graph capture: an event recorded on it now would be recorded into
// the capture, not queued after the work before it, and then answer as done (on a GPU,
// CUDA_ERROR_CAPTURED_EVENT). Its frees stay open until the capture ends.
TEST_F(StreamOrder, FreedOnAHeldStreamThatThenCapturesIsNotReusedOnAnotherStream) {
  for (std::size_t bytes : {gran, 3 * gran + 1}) {  // whole mappings (a slot's reuse is another path)
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    EXPECT_CU(drv().cuMemsetD8Async(p, 7, bytes, a));  // work before the free, held back
    free_on(*pool, p, a);
    ASSERT_CU(drv().cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_RELAXED));
    const unsigned long long waits = wait_calls();
    const CUdeviceptr q = alloc_on(*pool, bytes, b);
    EXPECT_TRUE(disjoint({{p, bytes}, {q, bytes}}) || wait_calls() > waits)
        << "memory freed on held stream A, capturing since, was handed to stream B without waiting for A";
    CUgraph graph = nullptr;
    ASSERT_CU(drv().cuStreamEndCapture(a, &graph));
    if (graph != nullptr) drv().cuGraphDestroy(graph);
    hold_stream(a, false);
    free_on(*pool, q, b);
  }
}

TEST_F(StreamOrder, FreedOnAHeldStreamIsNotReusedByASynchronousAllocation) {
  for (std::size_t bytes : sizes()) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    const unsigned long long waits = wait_calls();
    std::vector<CUdeviceptr> got;
    for (int i = 0; i < 20; ++i) {
      CUdeviceptr q = must_allocate(*pool, bytes);
      got.push_back(q);
      if (!disjoint({{p, bytes}, {q, bytes}})) {
        EXPECT_GT(wait_calls(), waits) << "memory freed on held stream A was handed to cuMemAlloc (allocation " << i
                                       << ") without waiting for A";
        break;
      }
    }
    hold_stream(a, false);
    for (CUdeviceptr q : got) must_free(*pool, q);
  }
}

// How the freeing stream's work comes to an end.
enum class Completion { HoldEnds, StreamSynchronize, CtxSynchronize };

class StreamOrderCompletion : public StreamOrder, public ::testing::WithParamInterface<Completion> {
 protected:
  void complete(CUstream s) {
    switch (GetParam()) {
      case Completion::HoldEnds: hold_stream(s, false); break;
      case Completion::StreamSynchronize: ASSERT_CU(drv().cuStreamSynchronize(s)); break;
      case Completion::CtxSynchronize: ASSERT_CU(drv().cuCtxSynchronize()); break;
    }
  }
};

TEST_P(StreamOrderCompletion, FreedOnAStreamIsReusedOnAnotherOnceItsWorkCompleted) {
  for (std::size_t bytes : {gran, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    complete(a);
    const unsigned long long vmm = vmm_build_calls();
    CUdeviceptr q = alloc_on(*pool, bytes, b);
    EXPECT_EQ(q, p) << "the completed free was not reused (a new mapping was built instead)";
    EXPECT_EQ(vmm_build_calls(), vmm);
    free_on(*pool, q, b);
  }
}

TEST_P(StreamOrderCompletion, FreedOnAStreamIsReusedByASynchronousAllocationOnceItsWorkCompleted) {
  for (std::size_t bytes : {gran, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    complete(a);
    const unsigned long long vmm = vmm_build_calls();
    CUdeviceptr q = must_allocate(*pool, bytes);
    EXPECT_EQ(q, p) << "the completed free was not reused (a new mapping was built instead)";
    EXPECT_EQ(vmm_build_calls(), vmm);
    must_free(*pool, q);
  }
}

INSTANTIATE_TEST_SUITE_P(Pool, StreamOrderCompletion,
                         ::testing::Values(Completion::HoldEnds, Completion::StreamSynchronize,
                                           Completion::CtxSynchronize),
                         [](const auto& info) {
                           switch (info.param) {
                             case Completion::HoldEnds: return std::string("HoldEnds");
                             case Completion::StreamSynchronize: return std::string("StreamSynchronize");
                             default: return std::string("CtxSynchronize");
                           }
                         });

TEST_F(StreamOrder, SmallSlotsFreedOnAHeldStreamAreNotHandedToAnotherStream) {
  auto pool = make_pool();
  // Fill most of one slab's slots, free them all on held A, then take as many on B.
  std::vector<CUdeviceptr> freed;
  for (int i = 0; i < 500; ++i) freed.push_back(alloc_on(*pool, 512, a));
  hold_stream(a, true);
  for (CUdeviceptr p : freed) free_on(*pool, p, a);
  const unsigned long long waits = wait_calls();
  std::vector<Block> taken;
  for (int i = 0; i < 500; ++i) {
    const CUdeviceptr q = alloc_on(*pool, 512, b);
    taken.push_back({q, 512});
    if (wait_calls() != waits) break;  // the pool waited for A: from here on reuse is fine
    for (CUdeviceptr p : freed)
      ASSERT_TRUE(disjoint({{p, 512}, {q, 512}})) << "a slot freed on held stream A was handed to stream B "
                                                     "(allocation " << i << ")";
  }
  hold_stream(a, false);
  for (const Block& x : taken) free_on(*pool, x.p, b);
}

// cuMemFree (Pool::deallocate) does not wait for the device, so freed memory may still be read by
// work queued before the free. It may stay mapped and be reused in stream order, but before the pool
// unmaps it (an emptied slab given back, a cached mapping taken apart) it must wait for that work:
// seen on an H200 as CUBLAS_STATUS_EXECUTION_FAILED with PYTORCH_NO_CUDA_MEMORY_CACHING=1.
TEST_F(StreamOrder, MemoryFreedWithWorkInFlightIsNotUnmappedBeforeTheWorkEnds) {
  auto unmaps = [&] { return sim().call_count("cuMemUnmap"); };
  for (const std::size_t bytes : {std::size_t{512} << 10, 3 * gran + 1}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto pool = make_pool();
    // Two slabs' worth of 512 KiB slots (freeing them all empties two: the second is given back),
    // or one large mapping (release_idle takes it apart).
    const int n = bytes < gran ? static_cast<int>(2 * gran / bytes) : 1;
    std::vector<CUdeviceptr> live;
    for (int i = 0; i < n; ++i) live.push_back(alloc_on(*pool, bytes, a));
    hold_stream(a, true);  // a kernel still running over that memory
    const unsigned long long waits = wait_calls(), unmapped = unmaps();
    for (CUdeviceptr p : live) must_free(*pool, p);
    if (bytes >= gran) {
      EXPECT_EQ(unmaps(), unmapped) << "a freed mapping stays cached (mapped)";
      pool->release_idle();
    }
    ASSERT_GT(unmaps(), unmapped) << "the test meant to make the pool unmap freed memory";
    EXPECT_GT(wait_calls(), waits) << "freed memory was unmapped while work queued before the free may use it";
    hold_stream(a, false);
  }
}

// The same, with allocations of two contexts of one device freed before the unmap: each context's
// work is its own to wait for (before, only the first context to free was synchronized).
TEST_F(StreamOrder, UnmappingFreedMemoryWaitsForEveryContextWhoseMemoryWasFreed) {
  auto pool = make_pool();
  CUcontext primary = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&primary));
  CUcontext other = nullptr;
  ASSERT_CU(drv().cuCtxCreate_v2(&other, 0, 0));  // current now
  CUstream theirs = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&theirs, CU_STREAM_NON_BLOCKING));
  const CUdeviceptr q = alloc_on(*pool, 3 * gran + 1, theirs);
  hold_stream(theirs, true);  // a kernel of the other context still running over q
  CUcontext popped = nullptr;
  ASSERT_CU(drv().cuCtxPopCurrent_v2(&popped));
  const CUdeviceptr p = alloc_on(*pool, 3 * gran + 1, a);
  must_free(*pool, p);  // the primary context's, noted first
  must_free(*pool, q);
  const unsigned long long unmapped = sim().call_count("cuMemUnmap");
  pool->release_idle();
  ASSERT_GT(sim().call_count("cuMemUnmap"), unmapped) << "the test meant to make the pool unmap freed memory";
  EXPECT_CU(drv().cuStreamQuery(theirs)) << "q was unmapped while the other context's work on it was held";
  hold_stream(theirs, false);
  EXPECT_CU(drv().cuStreamDestroy_v2(theirs));
  EXPECT_CU(drv().cuCtxDestroy_v2(other));
}

// A context destroyed with memory freed on its streams (cuCtxDestroy's hook calls context_destroying
// first): the pool waits for that work while the context exists, reuses the memory at once, and
// destroys the context's events, spare ones included, so that none outlives it (before, they stayed,
// and a handle of the next context made at the same address would have been given them).
TEST_F(StreamOrder, DestroyingAContextWaitsForItsFreesAndKeepsNoneOfItsEvents) {
  auto pool = make_pool();
  CUcontext other = nullptr;
  ASSERT_CU(drv().cuCtxCreate_v2(&other, 0, 0));  // current now
  CUstream theirs = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&theirs, CU_STREAM_NON_BLOCKING));
  // A spare event of the other context: a free on its stream, sealed and collected.
  free_on(*pool, alloc_on(*pool, 5000, theirs), theirs);
  pool->release_idle();
  // Memory freed on its stream while a kernel of it still runs over it.
  const CUdeviceptr p = alloc_on(*pool, 3 * gran + 1, theirs);
  hold_stream(theirs, true);
  free_on(*pool, p, theirs);
  CUcontext popped = nullptr;
  ASSERT_CU(drv().cuCtxPopCurrent_v2(&popped));
  const unsigned long long destroyed = sim().call_count("cuEventDestroy_v2");
  pool->context_destroying(other);
  EXPECT_CU(drv().cuStreamQuery(theirs)) << "its work was not waited for";
  EXPECT_EQ(sim().call_count("cuEventDestroy_v2"), destroyed + 1) << "its spare event was kept";
  const unsigned long long waits = wait_calls();
  const CUdeviceptr q = alloc_on(*pool, 3 * gran + 1, a);
  EXPECT_EQ(q, p) << "memory its stream freed, waited for, was not reused";
  EXPECT_EQ(wait_calls(), waits);
  hold_stream(theirs, false);
  EXPECT_CU(drv().cuStreamDestroy_v2(theirs));
  EXPECT_CU(drv().cuCtxDestroy_v2(other));
  // Nothing of it is left to ask the driver about.
  const unsigned long long records = sim().call_count("cuEventRecord"), queries = sim().call_count("cuEventQuery");
  must_free(*pool, q);
  pool->release_idle();
  EXPECT_EQ(sim().call_count("cuEventRecord"), records);
  EXPECT_EQ(sim().call_count("cuEventQuery"), queries);
}

// Memory freed on a stream, collected by an allocation of this thread while another thread captures
// a graph in global mode (PyTorch's default): the pool's query of its event is its own, made in the
// relaxed mode, so the other thread's capture stands (in the thread's default mode the driver would
// refuse the query and spoil the capture: tests/fidelity/capture_test.cpp).
TEST_F(StreamOrder, CollectingFreedMemoryLeavesAnotherThreadsGlobalCaptureIntact) {
  auto pool = make_pool();
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  const CUdeviceptr p = alloc_on(*pool, 3 * gran + 1, a);
  free_on(*pool, p, a);  // open on a: the next allocation elsewhere seals it and queries its event
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;  // 1: the capture has begun; 2: the allocation is made
  CUresult ended = CUDA_ERROR_UNKNOWN;
  std::thread capturer([&] {
    drv().cuCtxSetCurrent(context);
    CUstream c = nullptr;
    EXPECT_CU(drv().cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(drv().cuStreamBeginCapture_v2(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
    {
      std::unique_lock lock(mu);
      step = 1;
      cv.notify_all();
      cv.wait(lock, [&] { return step == 2; });
    }
    CUgraph graph = nullptr;
    ended = drv().cuStreamEndCapture(c, &graph);
    if (graph != nullptr) drv().cuGraphDestroy(graph);
    drv().cuStreamDestroy_v2(c);
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return step == 1; });
  }
  const unsigned long long queries = sim().call_count("cuEventQuery");
  const CUdeviceptr q = alloc_on(*pool, 3 * gran + 1, b);
  EXPECT_GT(sim().call_count("cuEventQuery"), queries) << "the test meant the pool to query its event";
  {
    std::lock_guard lock(mu);
    step = 2;
  }
  cv.notify_all();
  capturer.join();
  EXPECT_CU(ended) << "the other thread's capture was spoiled";
  must_free(*pool, q);
}

TEST_F(StreamOrder, FreesWithoutAnUnmapDoNotWait) {
  auto pool = make_pool();
  CUdeviceptr p = alloc_on(*pool, 3 * gran + 1, a);
  hold_stream(a, true);
  const unsigned long long waits = wait_calls();
  must_free(*pool, p);
  CUdeviceptr q = alloc_on(*pool, 3 * gran + 1, a);  // the cached mapping, reused in stream order
  EXPECT_EQ(q, p);
  EXPECT_EQ(wait_calls(), waits) << "a free and a reuse of a mapping that stays mapped need no wait";
  hold_stream(a, false);
  must_free(*pool, q);
}

// Repeated placement (src/pool/repeat_places.h): an allocation on a stream goes where the allocation
// made with as many of its size live went last, when that memory is free, however the frees came.
// Each test also runs with UVMPOOL_REPEAT_PLACES=0 and expects the other address, so that it shows
// the difference (most recently freed first, or best fit).
class RepeatedPlacement : public StreamOrder, public ::testing::WithParamInterface<bool> {
 protected:
  PoolConfig config(std::size_t carve_max = 0) const {
    PoolConfig c = test_config();
    c.repeat_places = GetParam();
    c.carve_max = carve_max;
    return c;
  }
};

// Freed first allocated first: reused most recently freed first, the first allocation of the next
// round would get the last one's address, and every buffer its neighbour's.
TEST_P(RepeatedPlacement, FreedOpenOnTheStreamEachComesBackToItsOwnAddress) {
  for (std::size_t carve_max : {std::size_t{0}, 256 * kMiB}) {
    for (std::size_t bytes : {std::size_t{5000}, 3 * gran + 1}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes, carve_max " + std::to_string(carve_max));
      auto pool = make_pool(config(carve_max));
      std::vector<CUdeviceptr> first;
      for (int i = 0; i < 4; ++i) first.push_back(alloc_on(*pool, bytes, a));
      hold_stream(a, true);  // the frees stay open on the stream
      for (CUdeviceptr p : first) free_on(*pool, p, a);
      std::vector<CUdeviceptr> again;
      for (int i = 0; i < 4; ++i) again.push_back(alloc_on(*pool, bytes, a));
      if (GetParam()) {
        EXPECT_EQ(again, first);
        EXPECT_EQ(pool->stats(0).repeat_places_kept, 4u);
        EXPECT_EQ(pool->stats(0).repeat_places_missed, 0u);
      } else {
        EXPECT_EQ(again.front(), first.back()) << "without it, the most recently freed comes first";
      }
      hold_stream(a, false);
      for (CUdeviceptr p : again) free_on(*pool, p, a);
    }
  }
}

// Frees sealed behind an event that has not completed yet (here: a synchronous allocation that
// wanted memory collected them while the stream is held) are the stream's own still: its next
// allocation at that point takes its block back rather than new memory. But only on that stream:
// another stream at the same point of the program (the same size, none of it live) does not take it
// before the event says the freeing stream's work is done.
TEST_P(RepeatedPlacement, AFreeWaitingBehindItsEventComesBackOnItsStreamAlone) {
  for (const bool same_stream : {true, false}) {
    SCOPED_TRACE(same_stream ? "allocated again on the freeing stream" : "allocated on another stream");
    auto pool = make_pool(config());
    const std::size_t bytes = 3 * gran + 1;
    const CUdeviceptr p = alloc_on(*pool, bytes, a);
    hold_stream(a, true);
    free_on(*pool, p, a);
    const CUdeviceptr other = must_allocate(*pool, 5 * gran);  // nothing cached fits: collects the frees
    const unsigned long long waits = wait_calls();
    const CUstream s = same_stream ? a : b;
    const CUdeviceptr q = alloc_on(*pool, bytes, s);
    if (!same_stream) {
      if (q == p) {
        EXPECT_GT(wait_calls(), waits) << "handed to stream b while stream a's work was held";
      }
    } else if (GetParam()) {
      EXPECT_EQ(q, p);
      EXPECT_EQ(wait_calls(), waits) << "taken back on its own stream without waiting";
    } else {
      EXPECT_NE(q, p) << "without it, only the stream's open frees are reused at once";
    }
    hold_stream(a, false);
    free_on(*pool, q, s);
    must_free(*pool, other);
  }
}

// Freed synchronously (cuMemFree of memory from cuMemAllocAsync): the first one freed is cached
// first, so the bins hand out the second first; best fit in a carved range hands out the lowest free
// address. Repeated placement takes each point's own address from either.
TEST_P(RepeatedPlacement, FreedSynchronouslyEachComesBackFromTheCacheOrTheRangeToItsOwnAddress) {
  const std::size_t bytes = 3 * gran + 1;
  {
    SCOPED_TRACE("stitched: cached mappings");
    auto pool = make_pool(config());
    const CUdeviceptr x = alloc_on(*pool, bytes, a), y = alloc_on(*pool, bytes, a);
    must_free(*pool, x);
    must_free(*pool, y);
    const CUdeviceptr q = alloc_on(*pool, bytes, a);
    EXPECT_EQ(q, GetParam() ? x : y);
    free_on(*pool, q, a);
  }
  {
    SCOPED_TRACE("carved: free space in the range");
    auto pool = make_pool(config(256 * kMiB));
    // x, g (another size), y, then h to keep the range's end apart; freed x, y, g: one free run
    // holding x's and y's places.
    const CUdeviceptr x = alloc_on(*pool, bytes, a);
    const CUdeviceptr g = alloc_on(*pool, 2 * bytes, a);
    const CUdeviceptr y = alloc_on(*pool, bytes, a);
    const CUdeviceptr h = alloc_on(*pool, 4 * bytes, a);
    for (CUdeviceptr p : {x, y, g}) must_free(*pool, p);
    const CUdeviceptr q0 = alloc_on(*pool, bytes, a);
    const CUdeviceptr q1 = alloc_on(*pool, bytes, a);
    if (GetParam()) {
      EXPECT_EQ(q0, x);
      EXPECT_EQ(q1, y);
    } else {
      EXPECT_NE(q1, y) << "without it, best fit places the second elsewhere";
    }
    for (CUdeviceptr p : {q0, q1, h}) free_on(*pool, p, a);
  }
}

INSTANTIATE_TEST_SUITE_P(On, RepeatedPlacement, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "On" : "Off"; });

}  // namespace
}  // namespace pooltest
