// What the launch hooks see (src/tiering/tiering.h), on the simulated driver with kernels: a pool
// spilling into host memory, real launches of the simulator's catalog in both argument forms, through
// CUfunction and CUkernel handles, and the touches each launch reports against the tier each pointer
// really lies in (as the driver says); copies and memsets as the transfer hooks report them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/tiering.h"
#include "trace/trace.h"
#include "trace_test.h"

namespace {

using namespace pooltest;
using uvmpool::tiering::LaunchTouches;
using uvmpool::tiering::Mode;
using uvmpool::tiering::Tiering;
using uvmpool::tiering::Touch;
using uvmpool::tiering::Transfer;
using uvmpool::tiering::TransferRange;

class LaunchTouches_ : public TieringTest {
 protected:
  void SetUp() override {
    TieringTest::SetUp();
    if (HasFatalFailure()) return;
    fill = kernel("uvmpool_fill_u32");
    struct_fill = kernel("uvmpool_struct_fill_u32");
    gather = kernel("uvmpool_gather_u32");
    tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams);
    tiering->set_observer(&LaunchTouches_::observe, this);
  }
  void TearDown() override {
    tiering.reset();
    TieringTest::TearDown();
  }

  static void observe(void* self, CUfunction, CUstream stream, const LaunchTouches& t) {
    auto* test = static_cast<LaunchTouches_*>(self);
    test->seen.emplace_back(t.touches, t.touches + t.count);
    test->seen_streams.push_back(stream);
  }

  // A device allocation, then one past the budget whose last chunk lies in host memory.
  void allocate_both_tiers() {
    on_device = allocate(8 * kMiB);
    spilled = allocate(kBudget);
    ASSERT_NE(spilled, 0u);
    in_host = spilled + kBudget - kMiB;
    ASSERT_EQ(tier_at(on_device), 'D');
    ASSERT_EQ(tier_at(in_host), 'H');
  }

  // The same, then the device allocation freed and given back: room to promote the spilled chunk.
  void allocate_with_room_to_promote() {
    allocate_both_tiers();
    must_free(*pool, on_device);
    allocated.erase(allocated.begin());
    pool->release_idle();
  }

  // Reports the launch to tiering, as the hooks do, then launches it.
  CUresult launch(CUfunction f, void** params, void** extra = nullptr) {
    uvmpool::tiering::LaunchSeen seen;
    tiering->before_launch(f, stream, params, extra, &seen);
    tiering->order_behind_moves(seen, stream);  // inside the submission gate, in the hooks
    const CUresult r = drv().cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, params, extra);
    tiering->after_launch(seen, stream);
    return r;
  }

  // Whether a copy as the mover makes (on `other`, beside a held stream) is queued within a second, on
  // a thread of its own: the caller joins `copier` once the hold is over, since a copy kept out by a
  // call waiting inside the driver returns only then.
  bool a_copy_goes_on(CUstream other, std::thread* copier) {
    auto copied = std::make_shared<std::atomic<bool>>(false);
    *copier = std::thread([this, other, copied, context = ctx] {
      drv().cuCtxSetCurrent(context);
      EXPECT_CU(drv().cuMemcpyDtoDAsync_v2(spilled, on_device, kMiB, other));
      *copied = true;
    });
    for (int i = 0; i < 1000 && !*copied; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return *copied;
  }

  // The touches of the one launch seen since the last call.
  std::vector<Touch> last_touches() {
    EXPECT_EQ(seen.size(), 1u) << "launches seen";
    std::vector<Touch> t = seen.empty() ? std::vector<Touch>{} : seen.back();
    seen.clear();
    return t;
  }
  static const Touch* find(const std::vector<Touch>& touches, CUdeviceptr p) {
    for (const Touch& t : touches)
      if (t.address == p) return &t;
    return nullptr;
  }

  uvmpool::tiering::StreamRegistry streams;
  std::unique_ptr<Tiering> tiering;
  CUfunction fill = nullptr, struct_fill = nullptr, gather = nullptr;
  CUdeviceptr on_device = 0, spilled = 0, in_host = 0;
  std::vector<std::vector<Touch>> seen;
  std::vector<CUstream> seen_streams;
};

TEST_F(LaunchTouches_, KernelParamsFormShowsEachPointerAndItsTier) {
  allocate_both_tiers();
  std::uint64_t count = kMiB / 4;
  std::uint32_t value = 7;
  for (CUdeviceptr dst : {on_device, in_host}) {
    void* params[] = {&dst, &count, &value};
    ASSERT_CU(launch(fill, params));
    const std::vector<Touch> t = last_touches();
    ASSERT_EQ(t.size(), 1u) << "the count and the value are no pool pointers";
    EXPECT_EQ(t[0].address, dst);
    EXPECT_NE(t[0].owner, 0u);
    EXPECT_EQ(t[0].host, dst == in_host);
  }
  EXPECT_EQ(seen_streams.back(), stream);
  const auto s = tiering->stats();
  EXPECT_EQ(s.launches_read, 2u);
  EXPECT_EQ(s.pointers, 2u);
  EXPECT_EQ(s.host_pointers, 1u);
  EXPECT_EQ(s.launches_in_place, 1u);
  EXPECT_EQ(s.layouts_asked, 1u) << "one function, asked once";
}

TEST_F(LaunchTouches_, ExtraFormShowsTheSame) {
  allocate_both_tiers();
  struct {
    CUdeviceptr dst;
    std::uint64_t count;
    std::uint32_t value, pad;
  } args{in_host, 16, 3, 0};
  std::size_t size = sizeof args;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  ASSERT_CU(launch(fill, nullptr, extra));
  const std::vector<Touch> t = last_touches();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].address, in_host);
  EXPECT_TRUE(t[0].host);
}

TEST_F(LaunchTouches_, PointersInsideAByValueStructAreFound) {
  allocate_both_tiers();
  const CUdeviceptr small = allocate(4 * kKiB);  // a slab slot
  UvmpoolSimStructFill arg{};
  arg.p[0] = reinterpret_cast<std::uint32_t*>(on_device);
  arg.p[1] = reinterpret_cast<std::uint32_t*>(in_host);
  arg.p[2] = reinterpret_cast<std::uint32_t*>(small);
  arg.count = 16;
  arg.value = 9;
  void* params[] = {&arg};
  ASSERT_CU(launch(struct_fill, params));
  const std::vector<Touch> t = last_touches();
  EXPECT_EQ(t.size(), 3u);
  ASSERT_NE(find(t, on_device), nullptr);
  ASSERT_NE(find(t, in_host), nullptr);
  ASSERT_NE(find(t, small), nullptr);
  EXPECT_FALSE(find(t, on_device)->host);
  EXPECT_TRUE(find(t, in_host)->host);
  EXPECT_NE(find(t, small)->owner, find(t, on_device)->owner);
}

TEST_F(LaunchTouches_, LibraryKernelsAreReadThroughKernelGetParamInfo) {
  allocate_both_tiers();
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  ASSERT_CU(drv().cuLibraryLoadData(&library, UVMPOOL_SIM_MODULE_IMAGE, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(drv().cuLibraryGetKernel(&kernel, library, "uvmpool_fill_u32"));
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  CUdeviceptr dst = in_host;
  void* params[] = {&dst, &count, &value};
  ASSERT_CU(launch(reinterpret_cast<CUfunction>(kernel), params));
  const std::vector<Touch> t = last_touches();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(t[0].host);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  ASSERT_CU(drv().cuLibraryUnload(library));
}

TEST_F(LaunchTouches_, PointersKeptInDeviceMemoryAreNotSeen) {
  // The gather kernel reads its rows through an array of pointers in device memory: the launch shows
  // the array and the output, never the rows. Addresses never change, so the kernel still works;
  // only tiering cannot move the rows ahead of it (docs/tiering.md).
  allocate_both_tiers();
  const CUdeviceptr rows = allocate(4 * kKiB);
  const CUdeviceptr out = allocate(4 * kKiB);
  const CUdeviceptr row_pointers[2] = {in_host, on_device};
  ASSERT_CU(drv().cuMemcpyHtoD_v2(rows, row_pointers, sizeof row_pointers));
  std::uint64_t row_count = 2, row_len = 4;
  CUdeviceptr rows_arg = rows, out_arg = out;
  void* params[] = {&rows_arg, &row_count, &row_len, &out_arg};
  ASSERT_CU(launch(gather, params));
  const std::vector<Touch> t = last_touches();
  EXPECT_EQ(t.size(), 2u);
  EXPECT_NE(find(t, rows), nullptr);
  EXPECT_NE(find(t, out), nullptr);
  EXPECT_EQ(find(t, in_host), nullptr);
}

TEST_F(LaunchTouches_, ForeignPointersAreNoTouches) {
  allocate_both_tiers();
  CUdeviceptr foreign = 0;
  ASSERT_CU(drv().cuMemAlloc_v2(&foreign, kMiB));
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&foreign, &count, &value};
  ASSERT_CU(launch(fill, params));
  EXPECT_TRUE(last_touches().empty());
  EXPECT_EQ(tiering->stats().launches_read, 1u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  ASSERT_CU(drv().cuMemFree_v2(foreign));
}

TEST_F(LaunchTouches_, NothingIsReadWhileNoPoolMemoryLiesInHostMemory) {
  on_device = allocate(8 * kMiB);
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&on_device, &count, &value};
  ASSERT_CU(launch(fill, params));
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(tiering->stats().launches_read, 0u);
  EXPECT_EQ(tiering->stats().layouts_asked, 0u) << "not even the layout is asked for";

  // Host memory mapped, then given back: reading stops again.
  allocate_both_tiers();
  ASSERT_CU(launch(fill, params));
  EXPECT_EQ(last_touches().size(), 1u);
  for (CUdeviceptr p : allocated)
    if (p != on_device) must_free(*pool, p);
  allocated = {on_device};
  EXPECT_TRUE(pool->any_host_mapped()) << "the freed spilled mapping stays cached, host chunks and all";
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  pool->release_idle();
  EXPECT_FALSE(pool->any_host_mapped());
  ASSERT_CU(launch(fill, params));
  EXPECT_TRUE(seen.empty());
}

// A function's first launch may load its module, which on a GPU waits inside the driver and keeps the
// mover's calls out (tiering/host_wait_gate.h): while the mover holds, it waits at the gate. Later
// launches of the same function go straight on.
TEST_F(LaunchTouches_, AFunctionsFirstLaunchWaitsWhileTheMoverHoldsAndLaterOnesDoNot) {
  allocate_both_tiers();
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&on_device, &count, &value};
  uvmpool::tiering::HostWaitGate& gate = streams.host_waits();
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  std::atomic<bool> launched{false};
  std::thread first([&, context = ctx] {
    drv().cuCtxSetCurrent(context);
    EXPECT_CU(launch(fill, params));
    launched = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(launched) << "a first launch went into the driver during a hold";
  gate.open();
  first.join();
  EXPECT_TRUE(launched);
  EXPECT_EQ(gate.waited(), 1u);
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  EXPECT_CU(launch(fill, params));  // no longer a first launch: would hang here if it waited
  gate.open();
  EXPECT_EQ(gate.waited(), 1u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  seen.clear();
}

// Asking the driver for a new kernel's parameter layout (cuKernelGetParamInfo, for a library's kernel
// as the CUDA runtime launches them) loads it as its first launch does: on an H200 it kept the mover's
// copy out under a hold (tests/gpu/hold_blocking.cu), and row 7 had holds given up while a backward
// thread ran inside the driver (none under CUDA_MODULE_LOADING=EAGER); the simulator models it so. A
// kernel's first launch, and a call that may load it, ask only once past the gate; meanwhile the
// mover's copy goes on beside the held stream.
TEST_F(LaunchTouches_, ANewKernelsLayoutIsAskedForOnlyPastTheGate) {
  allocate_both_tiers();
  CUlibrary library = nullptr;
  CUkernel fill_kernel = nullptr, struct_kernel = nullptr;
  ASSERT_CU(drv().cuLibraryLoadData(&library, UVMPOOL_SIM_MODULE_IMAGE, nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_CU(drv().cuLibraryGetKernel(&fill_kernel, library, "uvmpool_fill_u32"));
  ASSERT_CU(drv().cuLibraryGetKernel(&struct_kernel, library, "uvmpool_struct_fill_u32"));
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&on_device, &count, &value};
  void* flag_host = nullptr;
  ASSERT_CU(drv().cuMemHostAlloc(&flag_host, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  auto* flag = static_cast<std::uint32_t*>(flag_host);
  *flag = 0;
  CUdeviceptr flag_device = 0;
  ASSERT_CU(drv().cuMemHostGetDevicePointer_v2(&flag_device, flag_host, 0));
  CUstream mover_stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&mover_stream, CU_STREAM_NON_BLOCKING));
  uvmpool::tiering::HostWaitGate& gate = streams.host_waits();
  // One hold (the gate closed, then a wait on a pinned flag) for each of the two calls.
  const auto under_a_hold = [&](std::uint32_t hold, auto&& call) {
    ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
    ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, flag_device, hold, CU_STREAM_WAIT_VALUE_GEQ));
    // No ASSERT from here to the joins: the threads must be joined.
    std::atomic<bool> returned{false};
    std::thread program([&, context = ctx] {
      drv().cuCtxSetCurrent(context);
      call();
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(returned) << "hold " << hold << ": the call did not wait for the hold";
    EXPECT_EQ(tiering->stats().layouts_asked, hold - 1) << "hold " << hold << ": the layout was asked during the hold";
    std::thread mover;
    EXPECT_TRUE(a_copy_goes_on(mover_stream, &mover)) << "hold " << hold << ": the mover's copy waited for the program's call";
    __atomic_store_n(flag, hold, __ATOMIC_RELEASE);
    gate.open();
    mover.join();
    program.join();
    EXPECT_EQ(tiering->stats().layouts_asked, hold) << "hold " << hold;
  };
  under_a_hold(1, [&] { EXPECT_CU(launch(reinterpret_cast<CUfunction>(fill_kernel), params)); });
  under_a_hold(2, [&] {
    const uvmpool::tiering::ParamLayout* loading = tiering->begin_loading_call(reinterpret_cast<CUfunction>(struct_kernel));
    const CUresult r = drv().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, struct_kernel, 0);
    tiering->end_loading_call(loading, r);
    EXPECT_CU(r);
  });
  EXPECT_EQ(gate.waited(), 2u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  ASSERT_CU(drv().cuStreamSynchronize(mover_stream));
  drv().cuStreamDestroy_v2(mover_stream);
  drv().cuMemFreeHost(flag_host);
  ASSERT_CU(drv().cuLibraryUnload(library));
  seen.clear();
}

// Measured on an H200 (tests/gpu/hold_blocking.cu, 2026-11-28): a stream takes 1020 launches behind a
// hold, the next waits inside the driver for room, and the mover's copies wait with it; scoreboard row
// 7's job, which keeps its queue full, had every hold given up so. While a hold stands the program
// runs at most run_ahead launches ahead of the device; the next waits outside the driver, where the
// mover's copy does not wait for it, and goes on once the hold is released.
TEST_F(LaunchTouches_, WhileAHoldStandsTheProgramRunsAtMostRunAheadLaunchesAheadOfTheDevice) {
  allocate_both_tiers();
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&on_device, &count, &value};
  ASSERT_CU(launch(fill, params));  // loaded: the launches below are not first launches
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  const std::uint64_t before = tiering->mover().progress().outstanding();
  // The hold, as the mover places it: the gate closed, then a wait on a pinned flag.
  void* flag_host = nullptr;
  ASSERT_CU(drv().cuMemHostAlloc(&flag_host, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  auto* flag = static_cast<std::uint32_t*>(flag_host);
  *flag = 0;
  CUdeviceptr flag_device = 0;
  ASSERT_CU(drv().cuMemHostGetDevicePointer_v2(&flag_device, flag_host, 0));
  uvmpool::tiering::HostWaitGate& gate = streams.host_waits();
  ASSERT_TRUE(gate.close(std::chrono::milliseconds(1000)));
  CUstream mover_stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&mover_stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, flag_device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  // No ASSERT from here to the joins: the threads must be joined.
  constexpr int kLaunches = 1500;  // past the 1020 the stream takes
  std::atomic<int> launched{0};
  std::thread program([&, context = ctx] {
    drv().cuCtxSetCurrent(context);
    for (int i = 0; i < kLaunches; ++i) {
      EXPECT_CU(launch(fill, params));
      launched.fetch_add(1);
    }
  });
  // Until the program waits for room (or, without the bound, stops inside the driver), then a while.
  for (int i = 0; i < 1000 && tiering->stats().queue_waits == 0; ++i) {
    const int last = launched.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (last == launched.load() && last >= 1019) break;  // in the driver, its queue full
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::uint64_t run_ahead = tiering->mover().config().run_ahead;
  EXPECT_EQ(static_cast<std::uint64_t>(launched.load()), run_ahead - before) << "launches queued behind the hold";
  EXPECT_EQ(tiering->stats().queue_waits, 1u);
  std::thread mover;
  EXPECT_TRUE(a_copy_goes_on(mover_stream, &mover)) << "the mover's copy waited for the program's launch";
  __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
  gate.open();
  mover.join();
  program.join();
  EXPECT_EQ(launched.load(), kLaunches);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  ASSERT_CU(drv().cuStreamSynchronize(mover_stream));
  drv().cuStreamDestroy_v2(mover_stream);
  drv().cuMemFreeHost(flag_host);
  seen.clear();
}

// The calls on a function that load it lazily besides its launch (its attributes, its occupancy,
// cuFuncLoad; src/hooks/host_wait_hooks.cpp) wait at the gate while the mover holds, until one of them
// or a launch has loaded it. A call that failed loaded nothing.
TEST_F(LaunchTouches_, ACallThatLoadsAFunctionWaitsWhileTheMoverHoldsUntilTheFunctionIsLoaded) {
  uvmpool::tiering::HostWaitGate& gate = streams.host_waits();
  // Through the hooks' pair, as cuFuncSetAttribute's hook makes it.
  const auto set_attribute = [&](CUfunction f, int bytes) {
    const uvmpool::tiering::ParamLayout* loading = tiering->begin_loading_call(f);
    const CUresult r = drv().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
    tiering->end_loading_call(loading, r);
    return r;
  };
  // A call on a thread of the program while the gate is closed: whether it returned within `limit`
  // (the gate opens after that either way).
  const auto returns_at_a_closed_gate = [&](int bytes, CUresult expected, std::chrono::milliseconds limit) {
    EXPECT_TRUE(gate.close(std::chrono::milliseconds(1000)));
    std::atomic<bool> returned{false};
    std::thread call([&, context = ctx] {
      drv().cuCtxSetCurrent(context);
      EXPECT_CU_EQ(expected, set_attribute(gather, bytes));
      returned = true;
    });
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!returned && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool in_time = returned;
    gate.open();
    call.join();
    return in_time;
  };
  using std::chrono::milliseconds;
  EXPECT_FALSE(returns_at_a_closed_gate(-5, CUDA_ERROR_INVALID_VALUE, milliseconds(50)))
      << "a call that may load the function went into the driver during a hold";
  EXPECT_FALSE(returns_at_a_closed_gate(64 << 10, CUDA_SUCCESS, milliseconds(50)))
      << "a failed call counted the function as loaded";
  EXPECT_EQ(gate.waited(), 2u);
  EXPECT_TRUE(returns_at_a_closed_gate(32 << 10, CUDA_SUCCESS, milliseconds(5000)))
      << "a call on a loaded function waited for the hold";
  EXPECT_EQ(gate.waited(), 2u);
  int bytes = 0;
  EXPECT_CU(drv().cuFuncGetAttribute(&bytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, gather));
  EXPECT_EQ(bytes, 32 << 10);
  // Under `remote` nothing moves: no such call waits.
  Tiering remote(drv(), *pool, Mode::Remote, streams);
  EXPECT_EQ(remote.begin_loading_call(struct_fill), nullptr);
}

TEST_F(LaunchTouches_, AMoveChangesTheTierTheLaunchesSee) {
  allocate_both_tiers();
  ASSERT_CU(pool->fill_host_reserve(0, 8 * kMiB));
  // Make room on the device, then promote the spilled chunk.
  must_free(*pool, on_device);
  allocated.erase(allocated.begin());
  pool->release_idle();
  uvmpool::pool::Move m;
  ASSERT_CU(pool->prepare_move(in_host, kMiB, uvmpool::pool::Tier::Device, &m));
  ASSERT_NE(m.staging, 0u);
  ASSERT_CU(pool->copy_move(m, stream));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  ASSERT_CU(pool->commit_move(&m));
  ASSERT_EQ(tier_at(in_host), 'D');
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&in_host, &count, &value};
  ASSERT_CU(launch(fill, params));
  const std::vector<Touch> t = last_touches();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_FALSE(t[0].host);
}

// UVMPOOL_TIERING_EPOCHS=launch: no thread of the mover's own; the launching thread runs the epoch a
// kernel launch finds queued before it returns (the hold drains the launch itself, then the copy and
// the remap), so the next launch finds the memory moved. A copy or memset does not run one (its hook
// is still inside the host-wait gate), nor does a launch when the option is off.
TEST_F(LaunchTouches_, WithEpochsOnTheLaunchingThreadAKernelLaunchCarriesOutTheMovesQueued) {
  allocate_both_tiers();
  ASSERT_CU(pool->fill_host_reserve(0, 8 * kMiB));
  must_free(*pool, on_device);  // room on the device for the spilled chunk
  allocated.erase(allocated.begin());
  pool->release_idle();
  std::uint64_t count = kMiB / 4;
  for (const bool on_launch : {false, true}) {
    SCOPED_TRACE(on_launch ? "epochs on the launching thread" : "epochs on no thread");
    uvmpool::tiering::MoverConfig config;
    config.thread = false;
    config.on_launch = on_launch;
    tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, config);
    ASSERT_EQ(tier_at(in_host), 'H');
    ASSERT_TRUE(tiering->mover().request(in_host, kMiB, uvmpool::pool::Tier::Device));
    // A memset shown first: no epoch from it.
    uvmpool::tiering::LaunchSeen shown;
    const TransferRange range{in_host, 4096};
    tiering->before_transfer(Transfer::Memset, stream, {&range, 1}, &shown);
    tiering->after_launch(shown, stream);
    EXPECT_TRUE(tiering->mover().queued());
    std::uint32_t value = on_launch ? 7 : 3;
    void* params[] = {&in_host, &count, &value};
    ASSERT_CU(launch(fill, params));
    EXPECT_EQ(tiering->mover().queued(), !on_launch);
    EXPECT_EQ(tier_at(in_host), on_launch ? 'D' : 'H') << "after the launch returned";
    EXPECT_EQ(tiering->mover().stats().moves, on_launch ? 1u : 0u);
    ASSERT_CU(drv().cuStreamSynchronize(stream));
    EXPECT_TRUE(all_equal(in_host, kMiB, value)) << "the launch's bytes, moved with the chunk";
    seen.clear();
  }
}

TEST_F(LaunchTouches_, CopiesAndMemsetsShowThePoolMemoryTheyTouch) {
  // As the transfer hooks report them (src/hooks/transfer_hooks.cpp): each mapping a range crosses is
  // one touch, in host memory if any of its granules is; memory not the pool's is none.
  allocate_both_tiers();
  const auto transfer = [&](Transfer kind, std::vector<TransferRange> ranges) {
    uvmpool::tiering::LaunchSeen seen;
    tiering->before_transfer(kind, stream, ranges, &seen);
    tiering->after_launch(seen, stream);
    return std::vector<Touch>(seen.touches.touches, seen.touches.touches + seen.touches.count);
  };
  std::vector<Touch> t = transfer(Transfer::Memset, {{in_host, 4096}});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].address, in_host);
  EXPECT_TRUE(t[0].host);
  t = transfer(Transfer::Copy, {{in_host, kMiB}, {on_device, kMiB}});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].host);
  EXPECT_EQ(t[1].address, on_device);
  EXPECT_FALSE(t[1].host);
  // The whole spilled allocation, device granules first: one mapping, and it reaches host memory.
  t = transfer(Transfer::Copy, {{spilled, kBudget}});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].address, spilled);
  EXPECT_TRUE(t[0].host);
  EXPECT_TRUE(transfer(Transfer::Copy, {{4096, kMiB}, {in_host, 0}}).empty()) << "not pool memory, or no bytes";
  const auto s = tiering->stats();
  EXPECT_EQ(s.transfers_read, 4u);
  EXPECT_EQ(s.transfers_in_place, 3u);
  EXPECT_EQ(s.launches_read, 0u) << "transfers are not launches";
  EXPECT_EQ(tiering->policy_stats().launches, 3u) << "the policy is shown each transfer that touched pool memory";
}

TEST_F(LaunchTouches_, AMemsetDuringAnOverlappedCopyIsOrderedBehindTheCommitAndItsBytesStay) {
  allocate_with_room_to_promote();
  uvmpool::tiering::MoverConfig config;
  config.overlap = true;
  config.thread = false;
  constexpr std::size_t kWords = 16 * 1024;
  config.after_copy = [&] {
    // The program's memset of memory whose copy is already taken, through the hooks' steps.
    ASSERT_TRUE(tiering->mover().copying());
    const TransferRange r{in_host, kWords * 4};
    uvmpool::tiering::LaunchSeen seen;
    tiering->before_transfer(Transfer::Memset, stream, {&r, 1}, &seen);
    tiering->order_behind_moves(seen, stream);  // as the hook does, inside the submission gate
    ASSERT_CU(drv().cuMemsetD32Async(in_host, 0x77, kWords, stream));
    tiering->after_launch(seen, stream);
  };
  tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Remote, streams, config);
  ASSERT_TRUE(tiering->mover().request(in_host, kMiB, uvmpool::pool::Tier::Device));
  ASSERT_CU(tiering->mover().run_epoch());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tier_at(in_host), 'D') << "the move was not committed";
  EXPECT_EQ(tiering->stats().launches_ordered, 1u) << "the memset was not ordered behind the move";
  std::vector<std::uint32_t> got(kWords);
  ASSERT_CU(drv().cuMemcpyDtoH_v2(got.data(), in_host, kWords * 4));
  EXPECT_EQ(std::count(got.begin(), got.end(), 0x77u), static_cast<std::ptrdiff_t>(kWords)) << "the memset's write was lost";
}

// UVMPOOL_TIERING_EPOCHS=launch with overlapped copies: the launching thread places the ordered epoch
// right after the launch that asked (its fence lies there), and a later launch writing the moving
// memory is ordered behind the commit.
TEST_F(LaunchTouches_, WithOverlapAndEpochsOnLaunchTheLaunchingThreadPlacesTheOrderedEpoch) {
  allocate_with_room_to_promote();
  uvmpool::tiering::MoverConfig config;
  config.overlap = true;
  config.thread = false;
  config.on_launch = true;
  config.launches_per_epoch = 1;
  tiering = std::make_unique<Tiering>(drv(), *pool, Mode::Auto, streams, config);
  ASSERT_TRUE(tiering->mover().request(in_host, kMiB, uvmpool::pool::Tier::Device));
  std::uint64_t count = kMiB / 4;
  std::uint32_t value = 5;
  CUdeviceptr dst = spilled;  // device memory, not moving
  void* params[] = {&dst, &count, &value};
  ASSERT_CU(launch(fill, params));
  EXPECT_EQ(tiering->mover().standing_holds(), 1u) << "the launching thread placed no epoch";
  ASSERT_TRUE(tiering->mover().copying());
  dst = in_host;
  value = 0x66;
  ASSERT_CU(launch(fill, params));
  EXPECT_EQ(tiering->stats().launches_ordered, 1u);
  ASSERT_CU(tiering->mover().complete_placed(true));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tier_at(in_host), 'D');
  std::vector<std::uint32_t> got(kMiB / 4);
  ASSERT_CU(drv().cuMemcpyDtoH_v2(got.data(), in_host, kMiB));
  EXPECT_EQ(std::count(got.begin(), got.end(), 0x66u), static_cast<std::ptrdiff_t>(got.size())) << "the write was lost";
}

TEST_F(LaunchTouches_, ALaunchOfManyPointersKeepsSixtyFourAndCountsTheRest) {
  allocate_both_tiers();
  std::vector<CUdeviceptr> words;
  for (int i = 0; i < 80; ++i) words.push_back(spilled + static_cast<CUdeviceptr>(i) * 4096);
  std::size_t size = words.size() * sizeof(CUdeviceptr);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, words.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  uvmpool::tiering::LaunchSeen seen;
  tiering->before_launch(fill, stream, nullptr, extra, &seen);  // read only: the buffer is no fill's arguments
  EXPECT_EQ(last_touches().size(), LaunchTouches::kMax);
  EXPECT_EQ(tiering->stats().pointers, 80u);
}

TEST_F(LaunchTouches_, TheTraceShowsEachLaunchAndThePointersItPassed) {
  namespace tt = uvmpool::trace::testing;
  const tt::TempDir tmp;
  const std::string path = tmp.file("launches.json");
  allocate_both_tiers();
  ASSERT_TRUE(uvmpool::trace::start(path, 1 << 20, nullptr));
  // A struct holding a device pointer and a host one (uvmpool_struct_fill_u32's by-value argument).
  UvmpoolSimStructFill arg{};
  arg.p[0] = reinterpret_cast<std::uint32_t*>(on_device);
  arg.p[1] = reinterpret_cast<std::uint32_t*>(in_host);
  arg.count = 16;
  arg.value = 7;
  void* params[] = {&arg};
  ASSERT_CU(launch(struct_fill, params));
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* fill_params[] = {&on_device, &count, &value};
  ASSERT_CU(launch(fill, fill_params));
  uvmpool::trace::stop();

  const tt::json doc = tt::parse_trace(path);
  tt::check_well_formed(doc);
  const auto launches = tt::named(doc, "i", "launch");
  ASSERT_EQ(launches.size(), 2u);
  char function[32];
  std::snprintf(function, sizeof function, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(struct_fill)));
  EXPECT_EQ(launches[0]["args"]["function"], function);
  EXPECT_EQ(launches[0]["args"]["bytes"], 8 * kMiB + kBudget) << "both allocations, each once";
  EXPECT_EQ(launches[0]["args"]["host_bytes"], kBudget) << "the spilled one is read in place";
  EXPECT_EQ(launches[1]["args"]["bytes"], 8 * kMiB);
  EXPECT_EQ(launches[1]["args"]["host_bytes"], 0u);
  // Each pointer, after its launch on the same thread.
  const auto touches = tt::named(doc, "i", "touch");
  ASSERT_EQ(touches.size(), 3u);
  auto hex = [](CUdeviceptr p) {
    char text[32];
    std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(p));
    return std::string(text);
  };
  EXPECT_EQ(touches[0]["args"]["address"], hex(on_device));
  EXPECT_EQ(touches[0]["args"]["bytes"], 8 * kMiB);
  EXPECT_EQ(touches[0]["args"]["host_bytes"], 0u);
  EXPECT_EQ(touches[1]["args"]["address"], hex(in_host));
  EXPECT_EQ(touches[1]["args"]["bytes"], kBudget);
  EXPECT_EQ(touches[1]["args"]["host_bytes"], kBudget);
  EXPECT_EQ(touches[2]["args"]["address"], hex(on_device));
  EXPECT_EQ(touches[0]["tid"], launches[0]["tid"]);
  EXPECT_LE(tt::ts_of(launches[0]), tt::ts_of(touches[0]));
}

}  // namespace
