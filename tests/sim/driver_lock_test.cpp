// The driver's lock as the simulator models it (timeline::submit_and_wait), after what an H100 with
// driver 580 did (tests/gpu/hold_blocking.cu, docs/gpu-results.md): a copy that waits inside the driver
// for work queued behind an unwritten value keeps every other thread's calls out until it returns,
// except the synchronizing and querying ones; a copy from pageable memory waits for its stream even in
// its asynchronous form; under lazy loading a kernel's first launch waits for the other streams the
// same way; and (an H200 with driver 580) a launch finding its stream's queue full behind such a value
// (1020 pieces) waits for room the same way. Tiering's hold (src/tiering/host_wait_gate.h) and its
// bound on how far the program runs ahead during one (Tiering::wait_for_queue_room) are built around this.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using DriverLock = SimTest;
using LazyLoading = KernelTest;
using QueueRoom = KernelTest;
using namespace std::chrono_literals;

// A 32-bit flag in pinned host memory that streams can wait on.
struct Flag {
  Flag() {
    void* p = nullptr;
    EXPECT_CU(cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    host = static_cast<std::uint32_t*>(p);
    *host = 0;
    EXPECT_CU(cuMemHostGetDevicePointer(&device, p, 0));
  }
  void write() { __atomic_store_n(host, 1u, __ATOMIC_RELEASE); }
  std::uint32_t* host = nullptr;
  CUdeviceptr device = 0;
};

// Runs `call` on a thread with `context` current; done() says whether it has returned.
class Caller {
 public:
  template <typename Call>
  Caller(CUcontext context, Call call)
      : thread_([this, context, call] {
          cuCtxSetCurrent(context);
          result_ = call();
          done_.store(true, std::memory_order_release);
        }) {}
  ~Caller() { join(); }
  bool done() const { return done_.load(std::memory_order_acquire); }
  CUresult join() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  std::atomic<bool> done_{false};
  CUresult result_ = CUDA_ERROR_UNKNOWN;
  std::thread thread_;
};

// Whether `c` returns within `limit`.
bool returns_within(const Caller& c, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!c.done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return c.done();
}

TEST_F(DriverLock, AnAsynchronousCopyFromPageableMemoryWaitsForItsStream) {
  Flag flag;
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 1 << 20));
  std::vector<char> pageable(1 << 20, 1);
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, 1 << 20, 0));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(s, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  // Pinned: queued behind the wait, the call returns at once.
  ASSERT_CU(cuMemcpyHtoDAsync(device, pinned, 1 << 20, s));
  Caller copy(ctx, [&] { return cuMemcpyHtoDAsync(device, pageable.data(), 1 << 20, s); });
  EXPECT_FALSE(returns_within(copy, 100ms)) << "a pageable copy returned before the work ahead of it ran";
  flag.write();
  EXPECT_CU(copy.join());
  ASSERT_CU(cuStreamSynchronize(s));
}

TEST_F(DriverLock, ACopyWaitingBehindAValueKeepsOtherThreadsCallsOutButNotSynchronizes) {
  Flag flag;
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4 << 20));
  std::vector<char> pageable(1 << 20, 1);
  CUstream other = nullptr;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUevent before = nullptr;
  ASSERT_CU(cuEventCreate(&before, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(before, CU_STREAM_LEGACY));
  ASSERT_CU(cuStreamWaitValue32(CU_STREAM_LEGACY, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  Caller program(ctx, [&] { return cuMemcpyHtoD(device, pageable.data(), 1 << 20); });
  EXPECT_FALSE(returns_within(program, 50ms));
  // What the mover does while holding: wait for the work before the hold (goes), then copy (kept out).
  Caller synchronize(ctx, [&] { return cuEventSynchronize(before); });
  EXPECT_TRUE(returns_within(synchronize, 1000ms)) << "a synchronize was kept out";
  Caller copy(ctx, [&] { return cuMemcpyDtoDAsync(device + (2 << 20), device, 1 << 20, other); });
  EXPECT_FALSE(returns_within(copy, 100ms)) << "a copy on another stream went ahead of the waiting copy";
  flag.write();
  EXPECT_CU(program.join());
  EXPECT_CU(copy.join());
  EXPECT_CU(synchronize.join());
  ASSERT_CU(cuCtxSynchronize());
}

TEST_F(LazyLoading, AKernelsFirstLaunchWaitsForTheOtherStreamsAndKeepsOthersOutButNotLaterLaunches) {
  Flag flag;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4 << 20));
  CUstream held = nullptr, launcher = nullptr, other = nullptr;
  ASSERT_CU(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&launcher, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(held, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  CUfunction fill = kernel("uvmpool_fill_u32");
  Caller first(ctx, [&] { return launch(fill, launcher, p, std::uint64_t{16}, 1u); });
  EXPECT_FALSE(returns_within(first, 100ms)) << "a first launch went ahead of another stream's queued work";
  Caller copy(ctx, [&] { return cuMemcpyDtoDAsync(p + (2 << 20), p, 1 << 20, other); });
  EXPECT_FALSE(returns_within(copy, 100ms)) << "a copy went ahead of the loading launch";
  flag.write();
  EXPECT_CU(first.join());
  EXPECT_CU(copy.join());
  // Loaded now: behind another unwritten value, a launch of it goes straight on.
  ASSERT_CU(cuStreamWaitValue32(held, flag.device, 2, CU_STREAM_WAIT_VALUE_GEQ));
  Caller again(ctx, [&] { return launch(fill, launcher, p, std::uint64_t{16}, 2u); });
  EXPECT_TRUE(returns_within(again, 1000ms)) << "a second launch waited";
  __atomic_store_n(flag.host, 2u, __ATOMIC_RELEASE);
  EXPECT_CU(again.join());
  ASSERT_CU(cuCtxSynchronize());
}

// The calls on a function that load it (its attributes, its occupancy, cuFuncLoad) wait as its first
// launch does, for every stream of its context; once it is loaded, neither they nor its launch wait.
TEST_F(LazyLoading, ACallOnAFunctionLoadsItAsItsFirstLaunchWould) {
  Flag flag;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4 << 20));
  CUstream held = nullptr, launcher = nullptr;
  ASSERT_CU(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&launcher, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamWaitValue32(held, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  CUfunction fill = kernel("uvmpool_fill_u32");
  Caller attribute(ctx, [&] { return cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0); });
  EXPECT_FALSE(returns_within(attribute, 100ms)) << "loading the function went ahead of another stream's queued work";
  flag.write();
  EXPECT_CU(attribute.join());
  ASSERT_CU(cuStreamWaitValue32(held, flag.device, 2, CU_STREAM_WAIT_VALUE_GEQ));
  int blocks = 0;
  Caller occupancy(ctx, [&] { return cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill, 128, 0); });
  EXPECT_TRUE(returns_within(occupancy, 1000ms)) << "a loaded function's occupancy waited";
  Caller first_launch(ctx, [&] { return launch(fill, launcher, p, std::uint64_t{16}, 2u); });
  EXPECT_TRUE(returns_within(first_launch, 1000ms)) << "the launch of a function loaded by an attribute call waited";
  __atomic_store_n(flag.host, 2u, __ATOMIC_RELEASE);
  EXPECT_CU(occupancy.join());
  EXPECT_CU(first_launch.join());
  ASSERT_CU(cuCtxSynchronize());
}

// tests/gpu/hold_blocking.cu on an H200 (2026-11-28): 1020 launches queued behind the value, the next
// waited inside the driver until the value was written, and a copy of the mover's with it.
TEST_F(QueueRoom, ALaunchFindingItsQueueFullBehindAValueWaitsForRoomAndKeepsOtherThreadsCallsOut) {
  Flag flag;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4 << 20));
  CUstream held = nullptr, other = nullptr;
  ASSERT_CU(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUfunction fill = kernel("uvmpool_fill_u32");
  ASSERT_CU(launch(fill, held, p, std::uint64_t{16}, 1u));  // loaded: the launches below are not first ones
  ASSERT_CU(cuStreamWaitValue32(held, flag.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  for (int i = 0; i < 1019; ++i) ASSERT_CU(launch(fill, held, p, std::uint64_t{16}, 2u)) << "launch " << i;
  Caller full(ctx, [&] { return launch(fill, held, p, std::uint64_t{16}, 3u); });
  EXPECT_FALSE(returns_within(full, 100ms)) << "a launch went into a full queue";
  Caller query(ctx, [&] { return cuStreamQuery(other); });
  EXPECT_TRUE(returns_within(query, 1000ms)) << "a stream query was kept out";
  Caller copy(ctx, [&] { return cuMemcpyDtoDAsync(p + (2 << 20), p, 1 << 20, other); });
  EXPECT_FALSE(returns_within(copy, 100ms)) << "a copy went ahead of the launch waiting for room";
  flag.write();
  EXPECT_CU(full.join());
  EXPECT_CU(copy.join());
  EXPECT_CU(query.join());
  ASSERT_CU(cuStreamSynchronize(held));
  EXPECT_EQ(read_back(p, 1)[0], 3u) << "the launch that waited did not run last";
}

}  // namespace
}  // namespace simtest
