// The mover (src/tiering/mover.h) on the simulated driver with kernels: moves both ways with their
// bytes intact while kernels run on a non-blocking stream; work queued during the hold runs after
// the remap, on the new pieces; with overlapped copies, a launch touching a move is ordered behind
// its commit and other work runs beside the copy; a free during a
// move; a gather through pointers kept in device memory; a failing driver step at each step of the
// protocol; a graph capture putting an epoch off; the mover's own thread. Every test ends with the
// race detector having seen no memory change under unfinished work (TearDown).
#include <chrono>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/mover.h"
#include "trace/trace.h"
#include "trace_test.h"

namespace {

using namespace pooltest;
using uvmpool::pool::Tier;
using uvmpool::tiering::LaunchTouches;
using uvmpool::tiering::Mover;
using uvmpool::tiering::MoverConfig;
using uvmpool::tiering::StreamRegistry;

class Mover_ : public TieringTest {
 protected:
  void SetUp() override {
    TieringTest::SetUp();
    if (HasFatalFailure()) return;
    pool->stop_background();  // the host reserve stays as the tests leave it
    fill_kernel = kernel("uvmpool_fill_u32");
    touch_kernel = kernel("uvmpool_touch");
    gather_kernel = kernel("uvmpool_gather_u32");
    CUcontext context = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&context));
    streams.created(stream, context, true);  // as the cuStreamCreate hook lists it
  }
  void TearDown() override {
    mover.reset();
    streams.destroying(stream);
    TieringTest::TearDown();
  }

  void make_mover(MoverConfig config = {}) {
    config.thread = false;
    mover = std::make_unique<Mover>(drv(), *pool, streams, config);
  }
  // 8 MiB in device memory, then 16 MiB past the budget, in host memory; then 16 MiB of device memory
  // freed (held by the pool, idle), the room a promotion takes.
  void allocate_both_tiers() {
    on_device = allocate(8 * kMiB);
    filler = allocate(device_chunks(kBudget) * gran - 24 * kMiB);
    const CUdeviceptr room = must_allocate(*pool, 16 * kMiB);
    in_host = allocate(16 * kMiB);
    ASSERT_EQ(tiers(on_device, 8 * kMiB, gran), "DDDD");
    ASSERT_EQ(tiers(room, 16 * kMiB, gran), "DDDDDDDD");
    ASSERT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
    must_free(*pool, room);
  }
  // allocate_both_tiers, in_host filled with 9, and a mover with its own thread and 4 holds ahead.
  void start_mover_thread_over_both_tiers() {
    allocate_both_tiers();
    ASSERT_CU(fill_on_stream(on_device, 4, 0));  // both kernels loaded before any hold stands
    busy(on_device, 4, 1);
    fill(in_host, 16 * kMiB, 9);
    MoverConfig config;
    config.holds_ahead = 4;
    mover = std::make_unique<Mover>(drv(), *pool, streams, config);  // with its thread
  }
  // Until the mover committed `n` moves, for 20 s at most (a loaded CI machine); what it committed.
  std::uint64_t wait_for_moves(std::uint64_t n) {
    return stats_once([n](const uvmpool::tiering::MoverStats& s) { return s.moves >= n; }, std::chrono::seconds(20)).moves;
  }
  // A long kernel on `stream` reading [p, p + bytes) `passes` times: unfinished work on that memory,
  // for longer (in virtual time) than any copy of the mover's takes.
  void busy(CUdeviceptr p, std::size_t bytes, std::uint32_t passes = 4096) {
    std::uint64_t n = bytes;
    std::uint32_t write = 0;
    void* params[] = {&p, &n, &passes, &write};
    ASSERT_CU(drv().cuLaunchKernel(touch_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr));
  }
  // A thread of the program inside the host-wait gate for `time` (a call waiting inside the driver),
  // returned once it is in.
  std::thread stay_inside_gate(std::chrono::milliseconds time) {
    std::atomic<bool> inside{false};
    std::thread program([this, time, &inside] {
      const uvmpool::tiering::HostWaitGate::Pass pass(streams.host_waits());
      inside = true;
      std::this_thread::sleep_for(time);
    });
    while (!inside) std::this_thread::yield();
    return program;
  }
  // A thread of the program making `call` through `gate`, as a hook would, started from inside an
  // epoch (a MoverConfig callback), which waits 50 ms for it to reach the gate: `done` must still be
  // false then, since the gate is closed.
  std::thread call_at_closed_gate(uvmpool::tiering::HostWaitGate& gate, std::function<void()> call,
                                  std::atomic<bool>& done, const char* what) {
    std::thread program([&gate, &done, call = std::move(call), context = ctx] {
      drv().cuCtxSetCurrent(context);
      const uvmpool::tiering::HostWaitGate::Pass pass(gate);
      call();
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the call has reached the gate
    EXPECT_FALSE(done) << what;
    return program;
  }
  CUresult fill_on_stream(CUdeviceptr p, std::size_t bytes, std::uint32_t value) {
    std::uint64_t count = bytes / 4;
    void* params[] = {&p, &count, &value};
    return drv().cuLaunchKernel(fill_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
  }
  // The same as the launch hook makes it with overlapped copies (Tiering::order_behind_moves): behind
  // a wait for the commit of the moves it touches (`p`'s owner; with `unknown`, its pointers are not
  // known: every move). Counts the launches so ordered in `ordered`.
  CUresult ordered_fill(CUdeviceptr p, std::size_t bytes, std::uint32_t value, bool unknown = false) {
    LaunchTouches t;
    if (!unknown) t.add({p, pool->probe(p).owner, pool->probe(p).host});
    if (const std::uint32_t v = mover->order_value(t, unknown); v != 0) {
      ++ordered;
      // Refused (fault injection): the hook's thread would wait on the host for the commit, which
      // comes on this same thread here; the launch is left out instead.
      if (drv().cuStreamWaitValue32_v2(stream, mover->flag_device(), v, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    }
    return fill_on_stream(p, bytes, value);
  }
  int ordered = 0;

  // The room allocate_both_tiers freed, taken apart now while nothing waits: otherwise the mover
  // first fences for it (ItFencesForIdleRoomOnlyWithNoHoldStanding...), and that wait, which no
  // watchdog bounds, would take the program's queued work with it.
  void release_idle_room() {
    ASSERT_CU(drv().cuStreamSynchronize(stream));
    pool->release_idle();
  }
  // After a slow drain (SlowDrain below): in_host's first 4 MiB promoted, with `seed`'s contents,
  // past at least one hold timeout and with no hold given up.
  void expect_promoted_past_the_timeout(std::uint32_t seed) {
    const auto s = mover->stats();
    EXPECT_EQ(s.holds_given_up, 0u);
    EXPECT_GE(s.holds_extended, 1u);
    EXPECT_EQ(s.moves, 1u);
    EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
    ASSERT_CU(drv().cuStreamSynchronize(stream));
    EXPECT_TRUE(holds(in_host, 16 * kMiB, seed));
  }
  // The mover with its own thread, two holds ahead, and a hold timeout the tests' signals always beat.
  void start_threaded_mover(bool prepare_at_hold = false) {
    MoverConfig config;
    config.holds_ahead = 2;
    config.prepare_at_hold = prepare_at_hold;
    config.hold_timeout = std::chrono::seconds(30);
    mover = std::make_unique<Mover>(drv(), *pool, streams, config);
  }
  // The mover's statistics once `done` holds of them, or after `patience`.
  template <typename Done>
  uvmpool::tiering::MoverStats stats_once(Done done, std::chrono::seconds patience = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + patience;
    while (!done(mover->stats()) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return mover->stats();
  }
  // A 32-bit value in pinned host memory that the program's streams wait on (cuStreamWaitValue32) and
  // the test writes: work that cannot run until the test says so.
  struct HostSignal {
    HostSignal() {
      EXPECT_CU(drv().cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
      if (host == nullptr) return;
      write(0);
      EXPECT_CU(drv().cuMemHostGetDevicePointer_v2(&device, host, 0));
    }
    ~HostSignal() {
      if (host != nullptr) {
        EXPECT_CU(drv().cuMemFreeHost(host));
      }
    }
    HostSignal(const HostSignal&) = delete;
    HostSignal& operator=(const HostSignal&) = delete;
    // Read by the simulated driver's calls on other threads (the mover's).
    void write(std::uint32_t value) { __atomic_store_n(static_cast<std::uint32_t*>(host), value, __ATOMIC_RELEASE); }
    void* host = nullptr;
    CUdeviceptr device = 0;
  };

  // The fencing tests' start: the room of allocate_both_tiers lies behind a fence; with no hold
  // standing the mover fences for a promotion (shown as its step) and makes it.
  void fence_with_no_hold_standing(HostSignal& signal, bool prepare_at_hold) {
    using uvmpool::tiering::MoverStats;
    using uvmpool::tiering::MoverStep;
    allocate_both_tiers();  // its room freed synchronously: taking it apart needs a fence
    ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands
    fill(in_host, 16 * kMiB, 6);
    ASSERT_TRUE(pool->fence_due());
    start_threaded_mover(prepare_at_hold);
    // The mover fences, which waits for the queued work (held back by the signal).
    ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
    ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
    MoverStats s = stats_once([](const MoverStats& m) { return m.step == MoverStep::Fencing; });
    ASSERT_EQ(s.step, MoverStep::Fencing) << uvmpool::tiering::step_name(s.step);
    EXPECT_EQ(s.standing_holds, 0u);
    signal.write(1);
    s = stats_once([](const MoverStats& m) { return m.moves == 1 && m.standing_holds == 0; });
    ASSERT_EQ(s.moves, 1u);
    EXPECT_FALSE(pool->fence_due());
  }

  // Overlapped copies with the epochs on the launching thread (UVMPOOL_TIERING_COPY=overlap,
  // UVMPOOL_TIERING_EPOCHS=launch, as configured_mover() makes them: the mover's thread completes what
  // the launching thread places), in_host filled with 2, and a first request, which starts the thread.
  void start_ordered_on_launch(std::chrono::milliseconds hold_timeout) {
    allocate_both_tiers();
    ASSERT_CU(fill_on_stream(on_device, 4, 0));
    fill(in_host, 16 * kMiB, 2);
    MoverConfig config;
    config.overlap = true;
    config.on_launch = true;
    config.launches_per_epoch = 1;
    config.holds_ahead = 8;
    config.hold_timeout = hold_timeout;
    mover = std::make_unique<Mover>(drv(), *pool, streams, config);
    ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  }

  StreamRegistry streams;
  std::unique_ptr<Mover> mover;
  CUfunction fill_kernel = nullptr, touch_kernel = nullptr, gather_kernel = nullptr;
  CUdeviceptr on_device = 0, filler = 0, in_host = 0;
};

TEST_F(Mover_, MovesGoBothWaysWithTheirBytesWhileKernelsRunOnThem) {
  make_mover();
  allocate_both_tiers();
  fill(on_device, 8 * kMiB, 1);
  fill(in_host, 16 * kMiB, 2);
  busy(on_device, 8 * kMiB);  // unfinished when the epoch starts: the hold must wait for it
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");

  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 16 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  EXPECT_TRUE(holds(on_device, 8 * kMiB, 1));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
  const auto s = mover->stats();
  EXPECT_EQ(s.requested, 2u);
  EXPECT_EQ(s.epochs, 2u);
  EXPECT_EQ(s.moves, 2u);
  EXPECT_EQ(s.demoted_bytes, 8 * kMiB);
  EXPECT_EQ(s.promoted_bytes, 16 * kMiB);
  EXPECT_EQ(s.moves_failed, 0u);
  EXPECT_GT(s.held_ns, 0u);
  // Where the epochs' time went: 24 MiB copied took some, and the steps together no more than the
  // epochs' wall time (each step's time counted once, as it ends).
  const auto elapsed_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  EXPECT_GT(s.step_us[static_cast<std::size_t>(uvmpool::tiering::MoverStep::Copying)], 0u);
  std::uint64_t working_us = 0;
  for (std::size_t i = 1; i < uvmpool::tiering::kMoverSteps; ++i) working_us += s.step_us[i];
  EXPECT_LE(working_us, static_cast<std::uint64_t>(elapsed_us.count()));
}

TEST_F(Mover_, ItsStepTimesAreSummedOnTheClockItIsGiven) {
  // The modeled benchmarks give the simulator's virtual clock (MoverConfig::step_clock): here a clock
  // that moves 1 ms a reading, so each step that ended holds whole milliseconds, and no more than the
  // clock moved in all.
  std::atomic<std::int64_t> readings{0};
  MoverConfig config;
  config.step_clock = [&readings] { return 1000000 * readings.fetch_add(1); };
  make_mover(config);
  allocate_both_tiers();
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_until_idle());
  ASSERT_EQ(mover->stats().moves, 1u);
  const auto s = mover->stats();
  std::uint64_t working_us = 0;
  for (std::size_t i = 1; i < uvmpool::tiering::kMoverSteps; ++i) {
    EXPECT_EQ(s.step_us[i] % 1000, 0u) << "step " << i;
    working_us += s.step_us[i];
  }
  EXPECT_GE(working_us, 3000u) << "preparing, copying and remapping each ended";
  EXPECT_LE(working_us, 1000u * static_cast<std::uint64_t>(readings.load()));
}

TEST_F(Mover_, ARequestIsOutstandingUntilItIsCarriedOutOrRefused) {
  make_mover();
  allocate_both_tiers();  // 16 MiB of device room
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  EXPECT_TRUE(mover->outstanding(in_host, 16 * kMiB));
  EXPECT_FALSE(mover->outstanding(on_device, 8 * kMiB));
  ASSERT_CU(mover->run_epoch());
  EXPECT_FALSE(mover->outstanding(in_host, 16 * kMiB)) << "committed";
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "DDDD");
  const CUdeviceptr taken = allocate(8 * kMiB);  // the rest of the room
  ASSERT_EQ(tiers(taken, 8 * kMiB, gran), "DDDD");
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 8 * kMiB, Tier::Device));
  EXPECT_TRUE(mover->outstanding(in_host, 16 * kMiB));
  ASSERT_CU(mover->run_epoch());
  EXPECT_FALSE(mover->outstanding(in_host, 16 * kMiB)) << "refused for room (no demotion to wait for)";
  EXPECT_EQ(mover->stats().moves_failed, 1u);
}

TEST_F(Mover_, OneEpochMovesBothWaysAndAPromotionWaitsForTheRoomItsDemotionsMake) {
  make_mover();
  allocate_both_tiers();  // 16 MiB of device room
  fill(on_device, 8 * kMiB, 1);
  fill(in_host, 16 * kMiB, 2);
  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH") << "both directions in one epoch";
  EXPECT_EQ(mover->stats().epochs, 1u);

  // No room left but what a demotion of this epoch makes: the promotion waits one epoch for it.
  const CUdeviceptr taken = allocate(16 * kMiB);
  ASSERT_EQ(tiers(taken, 16 * kMiB, gran), "DDDDDDDD");
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 8 * kMiB, Tier::Device));
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
  EXPECT_EQ(mover->stats().moves_failed, 0u) << "put back, not refused";
  ASSERT_CU(mover->run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHDDDD");
  EXPECT_TRUE(holds(on_device, 8 * kMiB, 1));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
  const auto s = mover->stats();
  EXPECT_EQ(s.epochs, 3u);
  EXPECT_EQ(s.moves, 4u);
  EXPECT_EQ(s.moves_failed, 0u);
}

// Nothing commits while a batch is prepared, so once the pool refused a promotion for room, one at
// least as large in the same batch is put back without being asked of the pool (each ask is a
// placement tried for nothing: row 4b's first steps made about 20000 a step on an H200).
TEST_F(Mover_, APromotionNoSmallerThanOneRefusedForRoomIsNotAskedOfThePoolAgainInItsBatch) {
  make_mover();
  allocate_both_tiers();  // 16 MiB of device room
  const CUdeviceptr taken = allocate(16 * kMiB);  // none left
  ASSERT_EQ(tiers(taken, 16 * kMiB, gran), "DDDDDDDD");
  fill(in_host, 16 * kMiB, 3);
  const std::uint64_t refused = pool->stats(0).moves_failed;
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));  // the room the promotions wait for
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 8 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  // The first promotion asked twice (a synchronous free came since the last fence: asked, fenced, asked
  // again), the two after it not at all (4 asks without the rule).
  EXPECT_EQ(pool->stats(0).moves_failed - refused, 2u) << "the first promotion asked, the two after it put back";
  EXPECT_EQ(mover->stats().moves_failed, 0u) << "put back for the room the demotion made, not refused";
  ASSERT_CU(mover->run_until_idle());
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH") << "the room of the demotion, taken in order";
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 3));
}

// Held copies are pipelined with the remaps: each move commits once its own copy is done. A wait for
// one move's copy that fails leaves the moves before it committed and aborts it and those after it,
// with nothing lost.
TEST_F(Mover_, EachMoveCommitsOnceItsOwnCopyIsDoneAndAFailedWaitAbortsOnlyTheRest) {
  make_mover();
  allocate_both_tiers();  // 16 MiB of device room
  fill(in_host, 16 * kMiB, 2);
  // A clean epoch of two promotions, to count its event waits: the hold's, then one per move.
  const auto waits = [] { return sim().call_count("cuEventSynchronize"); };
  const auto before = waits();
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH");
  ASSERT_GE(waits() - before, 2u);
  const unsigned hold_waits = static_cast<unsigned>(waits() - before - 2);

  // Two demotions in one epoch: the wait for the second's copy fails, each of its three tries.
  busy(in_host, 8 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Host));
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Host));
  for (unsigned k = 0; k < 3; ++k) ASSERT_EQ(sim().fail("cuEventSynchronize", hold_waits + 2 + k, CUDA_ERROR_UNKNOWN), 0);
  ASSERT_CU(mover->run_epoch());
  sim().clear_failures();
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHDDHHHH") << "the first committed, the second aborted";
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 3u);
  EXPECT_EQ(s.moves_failed, 1u);
  EXPECT_EQ(s.epochs, 2u);
}

// UVMPOOL_TIERING_COMMIT=after: the epoch's copies are all waited for (its copy streams synchronized)
// before the first remap, with no wait for one move's copy; the moves commit alike. (On an H200 host
// mappings remapped 3.4x slower beside copies; row 4b was still faster beside: docs/tiering.md.)
TEST_F(Mover_, CommittingAfterTheCopiesWaitsForThemAllAndThenCommitsEveryMove) {
  MoverConfig config;
  config.commit_beside_copies = false;
  make_mover(config);
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 5);
  const auto event_waits = [] { return sim().call_count("cuEventSynchronize"); };
  const auto stream_waits = [] { return sim().call_count("cuStreamSynchronize"); };
  // The first epoch counts the hold's own waits: nothing of it waits for a move's copy.
  auto events = event_waits();
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  const auto hold_waits = event_waits() - events;
  events = event_waits();
  const auto streams = stream_waits();
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(event_waits() - events, hold_waits) << "no wait for one move's copy";
  EXPECT_GE(stream_waits() - streams, 2u) << "both copy streams waited for before the remaps";
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDHH");
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 5));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 3u);
  EXPECT_EQ(s.moves_failed, 0u);
}

TEST_F(Mover_, WorkQueuedDuringTheHoldRunsAfterTheRemapOnTheNewPieces) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 3);
  CUresult queued = CUDA_ERROR_UNKNOWN;
  MoverConfig config;
  config.inside_hold = [&] {
    // The program goes on launching: this write must land in the new (device) pieces, and the long
    // read after it must not start before the remap.
    queued = fill_on_stream(in_host, 4 * kMiB, 0xabcd);
    busy(in_host, 4 * kMiB);
  };
  make_mover(config);
  // The fill kernel loaded before (lazy loading): here the launch comes from the mover's own thread,
  // inside the hold, where a program's first launch would have waited at the gate.
  ASSERT_CU(fill_on_stream(on_device, kMiB, 0));
  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_CU(queued);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDHHHHHH");
  EXPECT_TRUE(all_equal(in_host, 4 * kMiB, 0xabcd)) << "the held write was lost";
  EXPECT_TRUE(window_holds(in_host, 4 * kMiB, 12 * kMiB, 3));
}

TEST_F(Mover_, AStreamMadeDuringAHoldWaitsForItToo) {
  allocate_both_tiers();
  CUstream late = nullptr;
  StreamRegistry::Hold seen;
  MoverConfig config;
  config.inside_hold = [&] {
    ASSERT_CU(drv().cuStreamCreate(&late, CU_STREAM_NON_BLOCKING));
    CUcontext context = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&context));
    seen = streams.created(late, context, true);
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_NE(seen.flag, 0u) << "a stream made during the hold was not told to wait";
  EXPECT_EQ(seen.value, 1u);
  EXPECT_EQ(streams.with_targets([](const auto&, StreamRegistry::Hold& h, auto&) { return h.flag; }), 0u)
      << "the hold outlived its epoch";
  streams.destroying(late);
  ASSERT_CU(drv().cuStreamDestroy_v2(late));
}

// A context made during a hold (the cuCtxCreate and cuDevicePrimaryCtxRetain hooks call
// context_made): listed, and its legacy stream, which orders its blocking streams, waits for the hold's
// end, so no work of it runs while memory is remapped. An event behind that wait stays incomplete
// until the epoch ends.
TEST_F(Mover_, AContextMadeDuringAHoldIsListedAndItsWorkWaitsForTheHold) {
  allocate_both_tiers();
  CUcontext made = nullptr;
  CUevent after = nullptr;
  CUresult during = CUDA_ERROR_UNKNOWN;
  bool listed = false;
  MoverConfig config;
  config.inside_hold = [&] {
    CUdevice device = 0;
    ASSERT_CU(drv().cuCtxGetDevice(&device));
    ASSERT_CU(drv().cuCtxCreate_v2(&made, 0, device));  // current now
    streams.context_made(drv(), made);
    ASSERT_CU(drv().cuEventCreate(&after, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(drv().cuEventRecord(after, CU_STREAM_LEGACY));
    during = drv().cuEventQuery(after);
    listed = streams.with_targets([&](const auto& targets, auto&, auto&) {
      return std::any_of(targets.begin(), targets.end(), [&](const StreamRegistry::Target& t) {
        return t.context == made && t.stream == CU_STREAM_LEGACY;
      });
    });
    CUcontext popped = nullptr;
    ASSERT_CU(drv().cuCtxPopCurrent_v2(&popped));
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_NE(made, nullptr);
  EXPECT_TRUE(listed) << "a context made during the hold was not listed";
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, during) << "work of a context made during the hold ran during it";
  ASSERT_CU(drv().cuCtxPushCurrent_v2(made));
  EXPECT_CU(drv().cuEventSynchronize(after)) << "the hold's end did not release it";
  EXPECT_CU(drv().cuEventDestroy_v2(after));
  CUcontext popped = nullptr;
  ASSERT_CU(drv().cuCtxPopCurrent_v2(&popped));
  streams.forget_context(made);
  EXPECT_CU(drv().cuCtxDestroy_v2(made));
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DH");
}

TEST_F(Mover_, OverlapOrdersALaunchTouchingAMoveBehindItsCommit) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 4);
  MoverConfig config;
  config.overlap = true;
  config.after_copy = [&] {
    // A launch the hooks saw, writing memory whose copy has already been taken: without its wait it
    // would write the old pieces, lost at the commit, and run while they are unmapped.
    ASSERT_TRUE(mover->copying());
    ASSERT_CU(ordered_fill(in_host, 2 * kMiB, 0x77));
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_FALSE(mover->copying());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(ordered, 1);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DH") << "the move was not committed";
  EXPECT_TRUE(all_equal(in_host, 2 * kMiB, 0x77)) << "the launch's write was lost";
  EXPECT_TRUE(window_holds(in_host, 2 * kMiB, 14 * kMiB, 4));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.epochs, 1u);
  EXPECT_EQ(s.held_ns, 0u) << "an ordered epoch holds no stream";
}

TEST_F(Mover_, TheTraceShowsEachMoveWithItsOutcomeAndTheHold) {
  namespace tt = uvmpool::trace::testing;
  const tt::TempDir tmp;
  const std::string path = tmp.file("moves.json");
  allocate_both_tiers();
  make_mover();
  ASSERT_TRUE(uvmpool::trace::start(path, 1 << 20, nullptr));
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  // The second epoch's move fails at its commit's unmap: dropped, the old mapping stands.
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 2 * kMiB, Tier::Device));
  ASSERT_EQ(sim().fail("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN), 0);
  ASSERT_CU(mover->run_epoch());
  sim().clear_failures();
  uvmpool::trace::stop();
  ASSERT_EQ(mover->stats().moves, 2u);
  ASSERT_EQ(mover->stats().moves_failed, 1u);

  const tt::json doc = tt::parse_trace(path);
  tt::check_well_formed(doc);
  auto hex = [](CUdeviceptr p) {
    char text[32];
    std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(p));
    return std::string(text);
  };
  // Async slices by direction, matched by id: begin with the bytes, end with the outcome.
  const auto demote_begin = tt::named(doc, "b", "demote"), demote_end = tt::named(doc, "e", "demote");
  ASSERT_EQ(demote_begin.size(), 1u);
  ASSERT_EQ(demote_end.size(), 1u);
  EXPECT_EQ(demote_begin[0]["id"], hex(on_device));
  EXPECT_EQ(demote_begin[0]["args"]["bytes"], 8 * kMiB);
  EXPECT_EQ(demote_end[0]["id"], hex(on_device));
  EXPECT_EQ(demote_end[0]["args"]["moved"], true);
  EXPECT_LE(tt::ts_of(demote_begin[0]), tt::ts_of(demote_end[0]));
  const auto promote_begin = tt::named(doc, "b", "promote"), promote_end = tt::named(doc, "e", "promote");
  ASSERT_EQ(promote_begin.size(), 2u);
  ASSERT_EQ(promote_end.size(), 2u);
  EXPECT_EQ(promote_begin[0]["id"], hex(in_host));
  EXPECT_EQ(promote_begin[0]["args"]["bytes"], 4 * kMiB);
  EXPECT_EQ(promote_begin[0]["args"]["host_bytes"], 0u);
  EXPECT_EQ(promote_end[0]["args"]["moved"], true);
  EXPECT_EQ(promote_end[1]["id"], hex(in_host + 8 * kMiB));
  EXPECT_EQ(promote_end[1]["args"]["moved"], false) << "its commit failed: dropped";
  // One hold per epoch, on the thread that ran it, with the bytes it moved.
  const auto holds_seen = tt::named(doc, "X", "hold");
  ASSERT_EQ(holds_seen.size(), 2u);
  EXPECT_EQ(holds_seen[0]["args"]["bytes"], 12 * kMiB);
  EXPECT_EQ(holds_seen[0]["args"]["host_bytes"], 8 * kMiB);
  EXPECT_EQ(holds_seen[1]["args"]["bytes"], 0u);
  EXPECT_EQ(holds_seen[0]["tid"], demote_end[0]["tid"]);
  EXPECT_GE(tt::ts_of(demote_end[0]), tt::ts_of(holds_seen[0]));
}

// Two moves of one epoch, a demotion whose memory the program writes during the copies and a
// promotion it does not touch: the write lands after the demotion's commit, in host memory, and the
// promotion commits beside it.
TEST_F(Mover_, OverlapOrdersTheWriteBehindTheMoveItTouchesAndCommitsTheOther) {
  allocate_both_tiers();
  fill(on_device, 8 * kMiB, 6);
  fill(in_host, 16 * kMiB, 5);
  MoverConfig config;
  config.overlap = true;
  config.after_copy = [&] { ASSERT_CU(ordered_fill(on_device, 8 * kMiB, 0x66)); };
  make_mover(config);
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(ordered, 1);
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH") << "the demotion was not committed";
  EXPECT_TRUE(all_equal(on_device, 8 * kMiB, 0x66)) << "the launch's write was lost";
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDHHHHHH") << "the promotion was not committed";
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 5));
  EXPECT_EQ(mover->stats().moves, 2u);
}

TEST_F(Mover_, OverlapLetsWorkOnOtherMemoryRunWithoutAWait) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 5);
  fill(on_device, 8 * kMiB, 6);
  MoverConfig config;
  config.overlap = true;
  config.after_copy = [&] {
    // Other memory, by a launch whose pointers are known: nothing to wait for.
    ASSERT_CU(ordered_fill(on_device, 2 * kMiB, 0x55));
  };
  make_mover(config);
  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(ordered, 0);
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDHHHHHH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 5));
  EXPECT_TRUE(all_equal(on_device, 2 * kMiB, 0x55));
  EXPECT_EQ(mover->stats().moves, 1u);
}

TEST_F(Mover_, PollingLetsTheProgramLaunchWhileTheCopiesRun) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 10);
  MoverConfig config;
  config.overlap = true;
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  EXPECT_EQ(mover->poll(), CUDA_ERROR_NOT_READY) << "the copies were not left running";
  EXPECT_TRUE(mover->copying());
  busy(on_device, 8 * kMiB);  // the program's work goes on beside the copies
  CUresult r = CUDA_ERROR_NOT_READY;
  for (int i = 0; i < 1000 && r == CUDA_ERROR_NOT_READY; ++i) {
    r = mover->poll();
    if (r == CUDA_ERROR_NOT_READY) busy(on_device, kMiB, 1);  // host time passes as the program launches
  }
  ASSERT_CU(r);
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 10));
  EXPECT_EQ(mover->stats().moves, 1u);
}

TEST_F(Mover_, AMoverDestroyedMidEpochLeavesTheOldMapping) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 11);
  MoverConfig config;
  config.overlap = true;
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  EXPECT_EQ(mover->poll(), CUDA_ERROR_NOT_READY);
  mover.reset();
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "HH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 11));
}

TEST_F(Mover_, OrderedEpochsAreNotAddedWhileAProgramCallWaitsAtTheGate) {
  // The first ordered epoch closes the host-wait gate; a program call then waits at it, and no further
  // epoch is placed until the standing one commits and lets it in.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 2);
  MoverConfig config;
  config.overlap = true;
  config.holds_ahead = 4;
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  ASSERT_EQ(mover->standing_holds(), 1u);
  std::atomic<bool> done{false};
  std::thread program = call_at_closed_gate(streams.host_waits(), [] {}, done, "the gate was open");
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 2 * kMiB, Tier::Device));
  EXPECT_EQ(mover->place_epoch(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(mover->standing_holds(), 1u) << "an epoch was added while a call waited at the gate";
  while (mover->standing_holds() > 0) ASSERT_CU(mover->complete_placed(true));  // the gate opens with the last
  program.join();
  EXPECT_TRUE(done);
  ASSERT_CU(mover->place_epoch());
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "DHDH");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
}

TEST_F(Mover_, AnOrderedEpochWhoseCopyWaitFailsCommitsOnlyOnceItsCopiesAreDone) {
  // The wait for the epoch's copies fails while they still run (behind long work before the fence):
  // the commit must not remap under them.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 6);
  MoverConfig config;
  config.overlap = true;
  make_mover(config);
  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  ASSERT_EQ(mover->standing_holds(), 1u);
  // Its two events, one per copy stream: the second, after the promotion's copy, fails.
  ASSERT_EQ(sim().fail("cuEventSynchronize", 2, CUDA_ERROR_UNKNOWN), 0);
  const CUresult completed = mover->complete_placed(true);
  sim().clear_failures();
  EXPECT_CU(completed);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(race_violations(), 0u) << "remapped under the copy";
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 6));
}

TEST_F(Mover_, OverlapOrdersALaunchItCouldNotReadBehindEveryMove) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 3);
  MoverConfig config;
  config.overlap = true;
  // On other memory, but its pointers are unknown: it may touch what moves.
  config.after_copy = [&] { ASSERT_CU(ordered_fill(on_device, 2 * kMiB, 0x44, true)); };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(ordered, 1);
  EXPECT_EQ(tiers(in_host, 2 * kMiB, gran), "D");
  EXPECT_TRUE(all_equal(on_device, 2 * kMiB, 0x44));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 3));
}

TEST_F(Mover_, AFreeDuringAMoveDoesNotWaitForItAndLosesNothing) {
  allocate_both_tiers();
  const CUdeviceptr victim = in_host;
  allocated.erase(std::find(allocated.begin(), allocated.end(), victim));
  std::thread freer;
  std::atomic<bool> freed{false};
  MoverConfig config;
  config.inside_hold = [&] {
    freer = std::thread([&] {
      CUresult r = CUDA_ERROR_UNKNOWN;
      pool->deallocate(victim, &r);
      EXPECT_CU(r);
      freed = true;
    });
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(victim, 8 * kMiB, Tier::Device));   // moves
  ASSERT_TRUE(mover->request(victim, 16 * kMiB, Tier::Device));  // refused: those pieces already move
  ASSERT_CU(mover->run_epoch());
  freer.join();
  EXPECT_TRUE(freed);
  EXPECT_EQ(mover->stats().moves, 1u);
  EXPECT_EQ(mover->stats().moves_failed, 1u);
  EXPECT_FALSE(pool->find(victim).has_value());
}

// The program's work queued before a hold waits for a value its thread writes only after freeing
// memory being moved; that free takes the pool's lock (free_while_moving). The hold's drain waits for
// that work: with the pool's lock held across the drain, the free and the drain waited for each
// other for good, and the watchdog could not help (it releases the hold, not the work before it).
TEST_F(Mover_, AFreeDuringTheDrainOfAHoldDoesNotWaitForIt) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 9);
  const CUdeviceptr victim = in_host;
  allocated.erase(std::find(allocated.begin(), allocated.end(), victim));
  pool->fence_freed();  // the promotion's room is ready: the mover places its hold without a fence first
  ASSERT_FALSE(pool->fence_due());
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  std::atomic<bool> holding{false};
  MoverConfig config;
  config.inside_hold = [&] { holding = true; };
  make_mover(config);
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(victim, 4 * kMiB, Tier::Device));
  CUresult epoch = CUDA_ERROR_UNKNOWN;
  std::thread mover_thread([&] { epoch = mover->run_epoch(); });
  const auto within = [](const std::atomic<bool>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return flag.load();
  };
  EXPECT_TRUE(within(holding)) << "no hold was placed";
  std::atomic<bool> freed{false};
  std::thread program([&] {
    CUresult r = CUDA_ERROR_UNKNOWN;
    pool->deallocate(victim, &r);
    EXPECT_CU(r);
    freed = true;
  });
  EXPECT_TRUE(within(freed)) << "the free waited for the hold's drain, which waits for the program";
  signal.write(1);  // the program's next step: the work before the hold goes on (and a waiting free)
  program.join();
  mover_thread.join();
  ASSERT_CU(epoch);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  const auto s = mover->stats();
  EXPECT_EQ(s.holds_given_up, 0u);
  EXPECT_EQ(s.moves, 1u) << "freed after the hold was placed: moved (and copied) all the same";
  EXPECT_FALSE(pool->find(victim).has_value());
  EXPECT_TRUE(window_holds(in_host, 4 * kMiB, 12 * kMiB, 9));
}

TEST_F(Mover_, AGatherThroughPointersKeptInDeviceMemoryStaysCorrect) {
  allocate_both_tiers();
  // Rows in host memory, their addresses in a device array: the launch shows only the array.
  constexpr std::uint64_t kRows = 4, kRowLen = 1024;
  fill(in_host, 16 * kMiB, 7);
  const CUdeviceptr rows = allocate(kRows * sizeof(CUdeviceptr));
  const CUdeviceptr out = allocate(kRows * kRowLen * 4);
  std::vector<CUdeviceptr> row_ptrs;
  for (std::uint64_t r = 0; r < kRows; ++r) row_ptrs.push_back(in_host + r * 3 * kMiB);
  ASSERT_CU(drv().cuMemcpyHtoD_v2(rows, row_ptrs.data(), row_ptrs.size() * sizeof(CUdeviceptr)));
  const auto gather = [&] {
    CUdeviceptr r = rows, o = out;
    std::uint64_t count = kRows, len = kRowLen;
    void* params[] = {&r, &count, &len, &o};
    return drv().cuLaunchKernel(gather_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
  };
  CUresult during = CUDA_ERROR_UNKNOWN;
  MoverConfig config;
  config.inside_hold = [&] { during = gather(); };
  make_mover(config);
  ASSERT_CU(gather());  // unfinished when the hold begins
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));  // rows 0 and 1 move, 2 and 3 stay
  ASSERT_CU(mover->run_epoch());
  ASSERT_CU(during);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH");
  for (std::uint64_t r = 0; r < kRows; ++r)
    EXPECT_TRUE(window_holds(in_host, r * 3 * kMiB, kRowLen * 4, 7));
  std::vector<unsigned char> got(kRows * kRowLen * 4), want(kRowLen * 4);
  ASSERT_CU(drv().cuMemcpyDtoH_v2(got.data(), out, got.size()));
  for (std::uint64_t r = 0; r < kRows; ++r) {
    ASSERT_CU(drv().cuMemcpyDtoH_v2(want.data(), in_host + r * 3 * kMiB, want.size()));
    EXPECT_EQ(0, std::memcmp(got.data() + r * want.size(), want.data(), want.size())) << "row " << r;
  }
}

// Each driver step of an epoch failing once: the old mapping stands (or the move completes), the
// bytes are intact, the program's stream is released, and nothing is left prepared.
class MoverFaults : public Mover_, public ::testing::WithParamInterface<const char*> {
 protected:
  // After a step failed: what was put off moves, the stream runs, the data and tiers are whole, and
  // the request ended once.
  void nothing_lost_after_the_fault() {
    ASSERT_CU(mover->run_until_idle());  // what was put off goes now
    ASSERT_CU(fill_on_stream(in_host + 12 * kMiB, 4 * kMiB, 0x99));
    ASSERT_CU(drv().cuStreamSynchronize(stream)) << "the stream stayed held";
    EXPECT_TRUE(window_holds(in_host, 0, 12 * kMiB, 8));
    EXPECT_TRUE(all_equal(in_host + 12 * kMiB, 4 * kMiB, 0x99));
    const std::string t = tiers(in_host, 4 * kMiB, gran);
    EXPECT_TRUE(t == "DD" || t == "HH") << t;
    const auto s = mover->stats();
    EXPECT_EQ(s.moves + s.moves_failed, 1u) << "each request ends once";
  }
  // With epochs placed and completed in two calls (holds ahead, or ordered epochs): the step fails in
  // the placement or in the completion. With overlap, a launch touching the moving memory is ordered
  // behind the commit while the copy runs.
  void placed_step_fails(MoverConfig config) {
    allocate_both_tiers();
    ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
    fill(in_host, 16 * kMiB, 8);
    config.holds_ahead = 2;
    if (config.overlap) config.after_copy = [&] { ASSERT_CU(ordered_fill(in_host + 12 * kMiB, 4 * kMiB, 0x99)); };
    make_mover(config);
    busy(in_host, 16 * kMiB);
    ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
    ASSERT_EQ(sim().fail(GetParam(), 1, CUDA_ERROR_UNKNOWN), 0) << GetParam();
    const CUresult placed = mover->place_epoch();
    EXPECT_TRUE(placed == CUDA_SUCCESS || placed == CUDA_ERROR_NOT_READY) << cu_name(placed);
    const CUresult completed = mover->complete_placed(true);
    sim().clear_failures();
    EXPECT_TRUE(completed == CUDA_SUCCESS || completed == CUDA_ERROR_NOT_READY) << cu_name(completed);
    EXPECT_EQ(mover->standing_holds(), 0u);
    EXPECT_FALSE(mover->copying()) << "an owner stayed published";
    nothing_lost_after_the_fault();
    EXPECT_EQ(race_violations(), 0u);
  }
};

TEST_P(MoverFaults, AFailingStepLosesNothingAndReleasesTheStreams) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
  fill(in_host, 16 * kMiB, 8);
  make_mover();
  busy(in_host, 16 * kMiB);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_EQ(sim().fail(GetParam(), 1, CUDA_ERROR_UNKNOWN), 0) << GetParam();
  const CUresult first = mover->run_epoch();
  sim().clear_failures();
  EXPECT_TRUE(first == CUDA_SUCCESS || first == CUDA_ERROR_NOT_READY) << cu_name(first);
  nothing_lost_after_the_fault();
}

TEST_P(MoverFaults, PreparedAtTheHoldAFailingStepLosesNothingAndReleasesTheStreams) {
  // The same with holds ahead, each epoch prepared when the work reaches its hold: the step fails in
  // the placement (the hold's event or wait) or at the hold (the preparation, copy or commit).
  MoverConfig config;
  config.prepare_at_hold = true;
  placed_step_fails(config);
}

// The same with overlapped copies, prepared at placement or at the fence.
TEST_P(MoverFaults, OrderedAFailingStepLosesNothingAndReleasesTheStreams) {
  MoverConfig config;
  config.overlap = true;
  placed_step_fails(config);
}
TEST_P(MoverFaults, OrderedPreparedAtTheFenceAFailingStepLosesNothingAndReleasesTheStreams) {
  MoverConfig config;
  config.overlap = true;
  config.prepare_at_hold = true;
  placed_step_fails(config);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, MoverFaults,
                         ::testing::Values("cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
                                           "cuMemcpyDtoDAsync_v2", "cuEventRecord", "cuStreamWaitValue32_v2",
                                           "cuEventSynchronize", "cuStreamSynchronize"),
                         [](const auto& info) { return std::string(info.param); });

TEST_F(Mover_, AHoldThatCannotDrainIsGivenUpAndTwoTurnMovesOff) {
  // Work queued before the hold waits for work queued after it, on another stream (as a kernel on one
  // device may wait for one on another): the hold would never drain.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 12);
  CUstream other = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  streams.created(other, context, true);
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  std::uint32_t round = 0;
  MoverConfig config;
  config.hold_timeout = std::chrono::milliseconds(100);
  config.inside_hold = [&] { ASSERT_CU(drv().cuStreamWriteValue32_v2(other, signal.device, ++round, 0)); };
  make_mover(config);
  // Twice: the second hold given up turns moves off for good (each would stall the program).
  for (std::uint32_t attempt = 1; attempt <= 2; ++attempt) {
    ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, attempt, CU_STREAM_WAIT_VALUE_GEQ));
    ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
    ASSERT_CU(mover->run_epoch());
    const auto s = mover->stats();
    EXPECT_EQ(s.moves, 0u);
    EXPECT_EQ(s.moves_failed, attempt);
    EXPECT_EQ(s.holds_given_up, attempt);
    EXPECT_EQ(s.off, attempt == 2);
    EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "HH");
    ASSERT_CU(drv().cuStreamSynchronize(other));
    ASSERT_CU(drv().cuStreamSynchronize(stream));
  }
  EXPECT_FALSE(mover->request(in_host, 4 * kMiB, Tier::Device)) << "moves are off";
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 12));
  streams.destroying(other);
  ASSERT_CU(drv().cuStreamDestroy_v2(other));
}

TEST_F(Mover_, HoldsAheadLandEachMoveWhereItWasAskedForInStreamOrder) {
  // Two epochs placed before either drains, with the program's work queued around them: each commits
  // once the work before its hold is done, and the work between the holds runs on the first epoch's
  // new pieces and the second epoch's old ones.
  MoverConfig config;
  config.holds_ahead = 2;
  make_mover(config);
  allocate_both_tiers();
  // Loaded before any hold stands: a kernel's first launch waits for the device (lazy loading, modeled
  // by the simulator), and a held device is only released by this thread's complete_placed.
  ASSERT_CU(fill_on_stream(on_device, 4, 0));
  fill(in_host, 16 * kMiB, 2);
  busy(in_host, 16 * kMiB);  // unfinished when the holds are placed: the first must wait for it
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  EXPECT_EQ(mover->standing_holds(), 1u);
  ASSERT_CU(fill_on_stream(in_host, 8 * kMiB, 3));    // between the holds: after the promotion
  ASSERT_CU(fill_on_stream(on_device, 8 * kMiB, 4));  // ... before the demotion
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->place_epoch());
  EXPECT_EQ(mover->standing_holds(), 2u);
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 2 * kMiB, Tier::Device));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, mover->place_epoch()) << "a third hold, with two allowed";
  ASSERT_CU(fill_on_stream(on_device + 4 * kMiB, 4 * kMiB, 5));  // after both holds: on the demoted pieces
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "HHHH") << "committed before the program's work reached its hold";
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->standing_holds(), 1u);
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "DDDD");
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "DDDD") << "the second epoch committed with the first";
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  ASSERT_CU(mover->run_until_idle());  // the third request, as one epoch
  EXPECT_EQ(tiers(in_host + 8 * kMiB, 2 * kMiB, gran), "D");
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(in_host, 8 * kMiB, 3));
  EXPECT_TRUE(all_equal(on_device, 4 * kMiB, 4));
  EXPECT_TRUE(all_equal(on_device + 4 * kMiB, 4 * kMiB, 5));
  EXPECT_TRUE(window_holds(in_host, 8 * kMiB, 8 * kMiB, 2));
  const auto s = mover->stats();
  EXPECT_EQ(s.epochs, 3u);
  EXPECT_EQ(s.moves, 3u);
  EXPECT_EQ(s.moves_failed, 0u);
}

// A mapping freed before an epoch's hold is placed (Held::frees_before) moves without a copy: no work
// may read it.
TEST_F(Mover_, AMappingFreedBeforeTheHoldMovesWithoutACopy) {
  make_mover();
  allocate_both_tiers();
  const CUdeviceptr early = must_allocate(*pool, 16 * kMiB);  // the room: device memory
  ASSERT_EQ(tiers(early, 16 * kMiB, gran), "DDDDDDDD");
  fill(on_device, 8 * kMiB, 4);
  must_free(*pool, early);
  ASSERT_TRUE(mover->request(early, 16 * kMiB, Tier::Host));
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(mover->stats().moves, 2u);
  EXPECT_EQ(tiers(early, 16 * kMiB, gran), "HHHHHHHH");
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_EQ(pool->stats(0).moved_uncopied_bytes, 16 * kMiB) << "early's alone: on_device is live";
  EXPECT_TRUE(holds(on_device, 8 * kMiB, 4));
}

// One freed behind a standing hold, whose held work still reads it, is copied with its bytes.
// Prepared at the hold, it is a cached mapping when prepared: a prepare could not tell it by its
// state from one freed before the hold (leaving out the copy of every mapping cached when prepared
// fails here: the held copy reads the demoted pieces and finds nothing of its pattern).
TEST_F(Mover_, PreparedAtTheHoldAMappingFreedBehindTheHoldIsCopiedForTheWorkHeldBeforeItsFree) {
  MoverConfig config;
  config.holds_ahead = 2;
  config.prepare_at_hold = true;
  make_mover(config);
  allocate_both_tiers();
  fill(on_device, 8 * kMiB, 4);
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->place_epoch());
  ASSERT_EQ(mover->standing_holds(), 1u);
  // Behind the hold: a copy reading on_device, then its free (as a program frees after queuing the
  // work that last reads a tensor).
  ASSERT_CU(drv().cuMemcpyDtoDAsync_v2(in_host, on_device, 8 * kMiB, stream));
  std::erase(allocated, on_device);
  must_free(*pool, on_device);
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(mover->stats().moves, 1u);
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_EQ(pool->stats(0).moved_uncopied_bytes, 0u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(holds(in_host, 8 * kMiB, 4)) << "the held copy read a mapping whose bytes were left behind";
}

// Prepared at the hold (prepare_at_hold), each epoch is made when the program's work reaches it, after
// the epochs before it committed: a promotion placed behind a demotion, with the device full, takes the
// room that demotion makes and lands at its own hold, in the program's order. Prepared at placement
// (the default), it finds no room then and waits for an epoch placed after the demotion committed,
// past the work it was asked for (this test fails so: "HHHH").
TEST_F(Mover_, PreparedAtTheHoldAPromotionTakesTheRoomTheDemotionBeforeItMakes) {
  MoverConfig config;
  config.holds_ahead = 2;
  config.prepare_at_hold = true;
  make_mover(config);
  allocate_both_tiers();
  const CUdeviceptr full = allocate(16 * kMiB);  // the last free device room
  ASSERT_EQ(tiers(full, 16 * kMiB, gran), "DDDDDDDD");
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands
  fill(in_host, 16 * kMiB, 2);
  fill(on_device, 8 * kMiB, 4);
  busy(in_host, 16 * kMiB);  // unfinished when the holds are placed
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->place_epoch());
  ASSERT_CU(fill_on_stream(in_host, 8 * kMiB, 3));  // between the holds: before the promotion
  ASSERT_TRUE(mover->request(in_host, 8 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  EXPECT_EQ(mover->standing_holds(), 2u);
  ASSERT_CU(fill_on_stream(in_host + 4 * kMiB, 4 * kMiB, 5));  // after both: on the promoted pieces
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "HHHH") << "the promotion lands at its own hold";
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "DDDD");
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(window_holds(on_device, 0, 8 * kMiB, 4));
  EXPECT_TRUE(all_equal(in_host, 4 * kMiB, 3));
  EXPECT_TRUE(all_equal(in_host + 4 * kMiB, 4 * kMiB, 5));
  EXPECT_TRUE(window_holds(in_host, 8 * kMiB, 8 * kMiB, 2));
  const auto s = mover->stats();
  EXPECT_EQ(s.epochs, 2u);
  EXPECT_EQ(s.moves, 2u);
  EXPECT_EQ(s.moves_failed, 0u);
  EXPECT_EQ(race_violations(), 0u);
}

TEST_F(Mover_, TheMoversThreadOrdersTheProgramsWritesBehindOverlappedMoves) {
  // The same with overlapped copies: no stream is held; the writes queued after each request (through
  // the submission gate, as the hooks queue them) that touch a move wait for its commit.
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // both kernels loaded before any epoch stands
  busy(on_device, 4, 1);
  fill(in_host, 16 * kMiB, 9);
  MoverConfig config;
  config.overlap = true;
  config.holds_ahead = 4;
  mover = std::make_unique<Mover>(drv(), *pool, streams, config);  // with its thread
  for (int i = 0; i < 4; ++i) {
    const CUdeviceptr p = in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB;
    busy(p, 4 * kMiB, 16);  // short, as above
    ASSERT_TRUE(mover->request(p, 4 * kMiB, Tier::Device));
    for (int k = 0; k < 20; ++k) {
      const uvmpool::tiering::HostWaitGate::Pass pass(streams.submissions());
      ASSERT_CU(ordered_fill(p, 2 * kMiB, 30 + i));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  ASSERT_EQ(wait_for_moves(4), 4u) << "moves failed: " << mover->stats().moves_failed;
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(mover->stats().held_ns, 0u);
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  for (int i = 0; i < 4; ++i) {
    const CUdeviceptr p = in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB;
    EXPECT_TRUE(all_equal(p, 2 * kMiB, 30 + i)) << "move " << i;
    EXPECT_TRUE(window_holds(in_host, static_cast<std::size_t>(i) * 4 * kMiB + 2 * kMiB, 2 * kMiB, 9)) << "move " << i;
  }
  EXPECT_GT(ordered, 0) << "no write was queued while a move was published";
}

// A program thread capturing a graph in global mode (PyTorch's default) while the mover's thread
// moves: the mover's queries and waits on its copies must not spoil the capture, as they would in
// the default interaction mode (tests/fidelity/capture_test.cpp; driver/capture_mode.h).
TEST_F(Mover_, TheMoversThreadLeavesAProgramsGlobalCaptureIntact) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // the kernel loaded before any hold stands
  fill(in_host, 16 * kMiB, 9);
  CUstream capturing = nullptr;  // not one the mover holds: the capture's stream waits for nothing
  ASSERT_CU(drv().cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  mover = std::make_unique<Mover>(drv(), *pool, streams, MoverConfig{});  // with its thread
  // The room's synchronous free fenced first: the fence's cuCtxSynchronize is refused during any
  // capture in the context (a gap docs/architecture.md names), and this test is about the rest.
  pool->fence_freed();
  ASSERT_CU(drv().cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_TRUE(mover->request(in_host, 16 * kMiB, Tier::Device));
  EXPECT_EQ(wait_for_moves(1), 1u) << "moves failed: " << mover->stats().moves_failed;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_CU(drv().cuStreamIsCapturing(capturing, &status));
  CUgraph graph = nullptr;
  EXPECT_CU(drv().cuStreamEndCapture(capturing, &graph)) << "the program's capture was spoiled";
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  if (graph != nullptr) EXPECT_CU(drv().cuGraphDestroy(graph));
  EXPECT_CU(drv().cuStreamDestroy_v2(capturing));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  EXPECT_TRUE(window_holds(in_host, 0, 16 * kMiB, 9));
}

TEST_F(Mover_, TheMoversThreadPlacesHoldsAheadAndCompletesThemInOrder) {
  // As in a program: the mover's own thread, requests coming while the program's work is queued
  // around them; every move lands, with the writes queued after each request on the new pieces.
  start_mover_thread_over_both_tiers();
  // Short kernels (16 passes, about 15 us each in virtual time): the mover's thread sees the program's
  // work progress only through its own driver calls, 200 ns of virtual time per event query, one round
  // of queries per 200 us of wall time between its steps. With 256 passes (about 1 ms of queued work)
  // a loaded CI machine took over the 10 s hold timeout to get there, and the hold was given up.
  for (int i = 0; i < 4; ++i) {
    const CUdeviceptr p = in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB;
    busy(p, 4 * kMiB, 16);
    ASSERT_TRUE(mover->request(p, 4 * kMiB, Tier::Device));
    ASSERT_CU(fill_on_stream(p, 2 * kMiB, 30 + i));
  }
  ASSERT_EQ(wait_for_moves(4), 4u) << "moves failed: " << mover->stats().moves_failed;
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDDDDD");
  for (int i = 0; i < 4; ++i) {
    const CUdeviceptr p = in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB;
    EXPECT_TRUE(all_equal(p, 2 * kMiB, 30 + i)) << "move " << i;
    EXPECT_TRUE(window_holds(in_host, static_cast<std::size_t>(i) * 4 * kMiB + 2 * kMiB, 2 * kMiB, 9)) << "move " << i;
  }
}

TEST_F(Mover_, TheEpochsGoToTheLaunchingThreadAndBackWithoutLosingAMove) {
  // UVMPOOL_TIERING_EPOCHS=measure hands the epochs over at run time (Mover::set_on_launch): while the
  // launching thread has them, the mover's thread leaves the requests alone and the caller's poll
  // carries them out; given back, the thread takes the ones queued meanwhile. Holds it placed before
  // the hand-over still complete (on either thread).
  start_mover_thread_over_both_tiers();
  ASSERT_FALSE(mover->on_launch());
  const auto part = [&](int i) { return in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB; };
  // The thread's: one move.
  ASSERT_TRUE(mover->request(part(0), 4 * kMiB, Tier::Device));
  ASSERT_CU(fill_on_stream(part(0), 2 * kMiB, 30));
  ASSERT_EQ(wait_for_moves(1), 1u) << "moves failed: " << mover->stats().moves_failed;
  // The launching thread's: the request waits for its poll.
  mover->set_on_launch(true);
  ASSERT_TRUE(mover->on_launch());
  ASSERT_TRUE(mover->request(part(1), 4 * kMiB, Tier::Device));
  ASSERT_CU(fill_on_stream(part(1), 2 * kMiB, 31));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(mover->stats().moves, 1u) << "the mover's thread took a request the launching thread had";
  EXPECT_TRUE(mover->queued());
  ASSERT_CU(mover->run_until_idle());  // as Tiering::after_launch's polls would, one hold at a time
  EXPECT_EQ(mover->stats().moves, 2u);
  // Back to the thread, with a request queued while the launching thread had the epochs.
  ASSERT_TRUE(mover->request(part(2), 4 * kMiB, Tier::Device));
  ASSERT_CU(fill_on_stream(part(2), 2 * kMiB, 32));
  mover->set_on_launch(false);
  ASSERT_EQ(wait_for_moves(3), 3u) << "moves failed: " << mover->stats().moves_failed;
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(tiers(in_host, 12 * kMiB, gran), "DDDDDD");
  EXPECT_EQ(tiers(part(3), 4 * kMiB, gran), "HH");
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(all_equal(part(i), 2 * kMiB, 30 + i)) << "move " << i;
    EXPECT_TRUE(window_holds(in_host, static_cast<std::size_t>(i) * 4 * kMiB + 2 * kMiB, 2 * kMiB, 9)) << "move " << i;
  }
}

TEST_F(Mover_, AStandingHoldThatDoesNotDrainIsGivenUpAndTheNextStillCommits) {
  // The work before the first hold waits for a signal the host writes only after the hold timeout:
  // the first epoch is given up (nothing of it commits), the second, placed behind it, commits.
  allocate_both_tiers();
  // Loaded before any hold stands (as in HoldsAheadLandEachMoveWhereItWasAskedForInStreamOrder).
  ASSERT_CU(fill_on_stream(on_device, 4, 0));
  fill(in_host, 16 * kMiB, 6);
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  MoverConfig config;
  config.holds_ahead = 2;
  config.hold_timeout = std::chrono::milliseconds(100);
  make_mover(config);
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  ASSERT_CU(fill_on_stream(in_host, 4 * kMiB, 7));  // between the holds
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, mover->complete_placed(false)) << "not drained, not timed out";
  ASSERT_CU(mover->complete_placed(true));  // gives the first up after 100 ms
  EXPECT_EQ(mover->stats().holds_given_up, 1u);
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "HHHH");
  signal.write(1);
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "HHDD");
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(in_host, 4 * kMiB, 7));
  EXPECT_TRUE(window_holds(in_host, 4 * kMiB, 12 * kMiB, 6));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.moves_failed, 1u);
  EXPECT_FALSE(s.off);
}

// Work before the hold that takes several hold timeouts to drain but keeps passing progress marks (a
// device busy with kernels that read host memory in place, as scoreboard row 7 on an H200: 14 s a
// step, and every hold given up) is waited for, not given up. `rounds` waits on the signal, each
// followed by a mark, released one by one `step` apart.
class SlowDrain {
 public:
  SlowDrain(Mover& mover, CUstream stream, CUdeviceptr signal, std::uint32_t rounds) {
    for (std::uint32_t r = 1; r <= rounds; ++r) {
      EXPECT_CU(drv().cuStreamWaitValue32_v2(stream, signal, r, CU_STREAM_WAIT_VALUE_GEQ));
      mover.progress().launched(stream, false);
      // Waited for by the writer once it released the round: in the simulator a query answers by
      // the asking thread's virtual clock, and the watchdog's thread only sleeps (wall time), so
      // the program's thread moves the clock past the mark as a synchronize of its own would.
      CUevent e = nullptr;
      EXPECT_CU(drv().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
      EXPECT_CU(drv().cuEventRecord(e, stream));
      passed_.push_back(e);
    }
  }
  // Writes 1, 2, ... into `host`, `step` apart, on a thread of its own.
  void release(void* host, std::chrono::milliseconds step) {
    writer_ = std::thread([this, host, step] {
      for (std::uint32_t r = 1; r <= passed_.size(); ++r) {
        std::this_thread::sleep_for(step);
        __atomic_store_n(static_cast<std::uint32_t*>(host), r, __ATOMIC_RELEASE);
        EXPECT_CU(drv().cuEventSynchronize(passed_[r - 1]));
      }
    });
  }
  ~SlowDrain() {
    if (writer_.joinable()) writer_.join();
    for (CUevent e : passed_) EXPECT_CU(drv().cuEventDestroy_v2(e));
  }

 private:
  std::vector<CUevent> passed_;
  std::thread writer_;
};

TEST_F(Mover_, AStandingHoldWhoseWorkKeepsPassingMarksIsWaitedForPastTheTimeout) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands
  fill(in_host, 16 * kMiB, 6);
  release_idle_room();
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  MoverConfig config;
  config.holds_ahead = 2;
  config.hold_timeout = std::chrono::milliseconds(250);
  config.progress_every = 1;
  make_mover(config);
  SlowDrain drain(*mover, stream, signal.device, 10);  // 10 x 50 ms: two hold timeouts
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());
  drain.release(signal.host, std::chrono::milliseconds(50));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  CUresult r = CUDA_ERROR_NOT_READY;
  while ((r = mover->complete_placed(false)) == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_CU(r);
  expect_promoted_past_the_timeout(6);
}

TEST_F(Mover_, AHoldWhoseWorkKeepsPassingMarksOutlivesTheWatchdog) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 8);
  release_idle_room();
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  MoverConfig config;
  config.hold_timeout = std::chrono::milliseconds(250);
  config.progress_every = 1;
  make_mover(config);
  SlowDrain drain(*mover, stream, signal.device, 10);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  drain.release(signal.host, std::chrono::milliseconds(50));
  ASSERT_CU(mover->run_epoch());  // the hold, drained 500 ms later under the watchdog
  expect_promoted_past_the_timeout(8);
}

// What the statistics say about the mover at this moment (uvmpool-stat's "tiering now" line): its
// thread's step and how long it has lasted, the holds standing, the gate and the calls waiting at it.
TEST_F(Mover_, ItsStatisticsSayWhatItWaitsForAndSince) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands
  fill(in_host, 16 * kMiB, 6);
  // The room freed by allocate_both_tiers is taken apart now, while nothing waits: otherwise the mover
  // would first fence for it (ItFencesForIdleRoomOnlyWithNoHoldStanding...), here waiting for the signal.
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  pool->release_idle();
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  start_threaded_mover();
  EXPECT_EQ(mover->stats().step, uvmpool::tiering::MoverStep::Idle);
  EXPECT_EQ(mover->stats().step_ms, 0u);
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  uvmpool::tiering::MoverStats s = stats_once([](const uvmpool::tiering::MoverStats& m) {
    return m.step == uvmpool::tiering::MoverStep::Draining && m.standing_holds == 1;
  });
  ASSERT_EQ(s.step, uvmpool::tiering::MoverStep::Draining) << uvmpool::tiering::step_name(s.step);
  ASSERT_EQ(s.standing_holds, 1u);
  EXPECT_TRUE(streams.host_waits().closed());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_GE(mover->stats().step_ms, s.step_ms + 50) << "the step's age keeps growing while it lasts";
  std::thread program([this] { const uvmpool::tiering::HostWaitGate::Pass pass(streams.host_waits()); });
  stats_once([this](const uvmpool::tiering::MoverStats&) { return streams.host_waits().waiters() != 0; });
  EXPECT_EQ(streams.host_waits().waiters(), 1);
  signal.write(1);
  program.join();  // the gate opens with the hold's release
  s = stats_once([](const uvmpool::tiering::MoverStats& m) {
    return m.moves == 1 && m.step == uvmpool::tiering::MoverStep::Idle;
  });
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.step, uvmpool::tiering::MoverStep::Idle) << uvmpool::tiering::step_name(s.step);
  EXPECT_EQ(s.standing_holds, 0u);
  EXPECT_FALSE(streams.host_waits().closed());
  EXPECT_EQ(streams.host_waits().waiters(), 0);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
}

// The mover prepares without waiting for the device (pool::MoveWaits::NoWait). Room that lies in idle
// mappings behind a fence (a synchronous free since the last one) is fenced for by the mover only while
// none of its holds stand, and shows as its step; while a hold stands, such a move is refused instead,
// and the hold is never released for a fence of the mover's own (before, the pool's wait broke it).
TEST_F(Mover_, ItFencesForIdleRoomOnlyWithNoHoldStandingAndNeverBreaksItsOwnHolds) {
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  fence_with_no_hold_standing(signal, false);
  if (HasFatalFailure()) return;
  using uvmpool::tiering::MoverStats;
  using uvmpool::tiering::MoverStep;
  MoverStats s;
  // A hold stands (the work before it waits for the signal); a synchronous free makes a fence due;
  // a promotion that needs the idle room is refused, and the standing hold is left alone.
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 2, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  s = stats_once([](const MoverStats& m) { return m.standing_holds == 1; });
  ASSERT_EQ(s.standing_holds, 1u);
  must_free(*pool, on_device);
  allocated.erase(std::find(allocated.begin(), allocated.end(), on_device));
  ASSERT_TRUE(pool->fence_due());
  const std::uint64_t failed = s.moves_failed;
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 4 * kMiB, Tier::Device));
  s = stats_once([&](const MoverStats& m) { return m.moves_failed > failed; });
  EXPECT_EQ(s.moves_failed, failed + 1) << "refused for room behind the fence";
  EXPECT_EQ(s.holds_broken, 0u);
  EXPECT_EQ(s.standing_holds, 1u);
  EXPECT_NE(s.step, MoverStep::Fencing);
  signal.write(2);
  s = stats_once([](const MoverStats& m) { return m.moves == 2 && m.standing_holds == 0; });
  EXPECT_EQ(s.moves, 2u);
  EXPECT_EQ(s.holds_broken, 0u);
  EXPECT_EQ(s.holds_given_up, 0u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH");
  EXPECT_TRUE(window_holds(in_host, 0, 16 * kMiB, 6));
}

// The same, with each epoch prepared when the program's work reaches its hold (prepare_at_hold): a
// move asked while a hold stood, needing room freed after that hold was placed, is refused at its
// hold, and the hold is never released for a fence of the mover's own. Asked again with no hold
// standing, the mover fences (at the placement) and makes it.
TEST_F(Mover_, PreparedAtTheHoldItFencesForIdleRoomOnlyWithNoHoldStanding) {
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  fence_with_no_hold_standing(signal, true);
  if (HasFatalFailure()) return;
  using uvmpool::tiering::MoverStats;
  using uvmpool::tiering::MoverStep;
  MoverStats s;
  // A hold stands (the work before it waits for the signal); a synchronous free makes a fence due;
  // the promotions asked meanwhile need the idle room, and are refused when the work reaches their
  // holds, which are left alone.
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 2, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  s = stats_once([](const MoverStats& m) { return m.standing_holds == 1; });
  ASSERT_EQ(s.standing_holds, 1u);
  must_free(*pool, on_device);
  allocated.erase(std::find(allocated.begin(), allocated.end(), on_device));
  ASSERT_TRUE(pool->fence_due());
  const std::uint64_t failed = s.moves_failed;
  ASSERT_TRUE(mover->request(in_host + 8 * kMiB, 4 * kMiB, Tier::Device));
  s = stats_once([](const MoverStats& m) { return m.standing_holds == 2; });
  EXPECT_EQ(s.standing_holds, 2u);
  EXPECT_NE(s.step, MoverStep::Fencing);
  signal.write(2);
  s = stats_once([&](const MoverStats& m) { return m.moves_failed == failed + 2 && m.standing_holds == 0; });
  EXPECT_EQ(s.moves_failed, failed + 2) << "refused for room behind the fence";
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.holds_broken, 0u);
  EXPECT_EQ(s.holds_given_up, 0u);
  EXPECT_TRUE(pool->fence_due()) << "no fence made while a hold stood";
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDHHHHHH");
  // No hold stands: asked again, the mover fences first and the promotion finds the room.
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  s = stats_once([](const MoverStats& m) { return m.moves == 2 && m.standing_holds == 0; });
  EXPECT_EQ(s.moves, 2u);
  EXPECT_FALSE(pool->fence_due());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "DDDDHHHH");
  EXPECT_TRUE(window_holds(in_host, 0, 16 * kMiB, 6));
}

TEST_F(Mover_, APoolWaitUnderItsLockReleasesTheStandingHoldsAndTheirEpochsCommitNothing) {
  // Two holds stand; the program then frees memory its work behind the holds still writes, and asks
  // for a size the pool serves by taking that cached mapping apart: the unmap waits for the device
  // (a free's fence, under the pool's lock), which completing the holds needs. The wait releases both
  // holds first (on a GPU it hung a DDP rank for good: docs/gpu-results.md); the fill behind them
  // runs before the unmap, and neither epoch commits.
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
  fill(on_device, 8 * kMiB, 12);
  const CUdeviceptr x = must_allocate(*pool, 16 * kMiB);  // the cached room
  ASSERT_NE(x, 0u);
  MoverConfig config;
  config.holds_ahead = 2;
  make_mover(config);
  busy(on_device, 8 * kMiB);  // unfinished when the holds are placed
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(mover->request(on_device + static_cast<CUdeviceptr>(i) * 4 * kMiB, 4 * kMiB, Tier::Host));
    ASSERT_CU(mover->place_epoch());
  }
  ASSERT_EQ(mover->standing_holds(), 2u);
  ASSERT_CU(fill_on_stream(x, 16 * kMiB, 13));  // behind both holds, on memory about to be freed
  const std::uint64_t broken_before = pool->stats(0).mappings_broken;
  must_free(*pool, x);
  const CUdeviceptr y = allocate(20 * kMiB);  // larger than any cached mapping: x's is taken apart for its chunks
  ASSERT_NE(y, 0u);
  EXPECT_GT(pool->stats(0).mappings_broken, broken_before) << "the test needs the cached mapping taken apart";
  EXPECT_EQ(mover->stats().holds_broken, 1u);
  // No hold stands any more: the gate is open before the mover completes the released epochs, so a
  // program call that may wait in the driver goes in at once.
  EXPECT_FALSE(streams.host_waits().closed()) << "the gate stayed closed after the holds were released";
  ASSERT_CU(mover->complete_placed(true));
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->standing_holds(), 0u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "DDDD") << "an epoch whose hold was released committed";
  EXPECT_TRUE(window_holds(on_device, 0, 8 * kMiB, 12));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 0u);
  EXPECT_EQ(s.holds_given_up, 0u) << "released for the pool's wait, not by the watchdog";
  EXPECT_FALSE(s.off);
  // Holds are placed again once the wait is over, and the next epoch commits.
  ASSERT_TRUE(mover->request(on_device, 4 * kMiB, Tier::Host));
  ASSERT_CU(mover->run_until_idle());
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHDD");
  EXPECT_TRUE(window_holds(on_device, 0, 8 * kMiB, 12));
}

TEST_F(Mover_, TheStallGuardReleasesTheHoldsWhenTheMoversThreadIsStuck) {
  // A hold stands on work that does not drain, and the mover's thread is stuck where no timeout of
  // its own runs (demotions: a promotion's room could make the pool fence, which waits for the
  // program's own wait below) (here: waiting for the stream registry's lock, which another thread keeps for 1.5 s).
  // The stall guard releases the standing hold after twice the hold timeout, as a hold given up,
  // while the mover's thread is still stuck; the epoch commits nothing; the next one commits.
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
  fill(on_device, 8 * kMiB, 14);
  HostSignal signal;
  ASSERT_NE(signal.device, 0u);
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  MoverConfig config;
  config.holds_ahead = 2;
  config.hold_timeout = std::chrono::milliseconds(100);
  mover = std::make_unique<Mover>(drv(), *pool, streams, config);  // with its thread and the guard
  ASSERT_TRUE(mover->request(on_device, 4 * kMiB, Tier::Host));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (mover->standing_holds() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(mover->standing_holds(), 1u);
  std::atomic<bool> locked{false};
  std::thread keeper([&] {
    streams.with_targets([&](const std::vector<StreamRegistry::Target>&, StreamRegistry::Hold&, auto&) {
      locked = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return 0;
    });
  });
  while (!locked) std::this_thread::yield();
  ASSERT_TRUE(mover->request(on_device + 4 * kMiB, 4 * kMiB, Tier::Host));  // its epoch waits for the registry
  // Then a program call that may wait in the driver (a synchronous copy) waits at the closed gate (not
  // before: with a call waiting there the mover places no further hold, and would not get stuck).
  stats_once([](const uvmpool::tiering::MoverStats& m) { return m.step == uvmpool::tiering::MoverStep::Preparing; });
  std::atomic<bool> passed{false};
  std::thread program([&] {
    const uvmpool::tiering::HostWaitGate::Pass pass(streams.host_waits());
    passed = true;
  });
  const auto guard_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
  while ((mover->stats().holds_given_up == 0 || !passed) && std::chrono::steady_clock::now() < guard_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(mover->stats().holds_given_up, 1u) << "the guard released nothing while the mover's thread was stuck";
  EXPECT_TRUE(passed) << "the program's call stayed at the gate while the mover's thread was stuck";
  program.join();
  keeper.join();
  signal.write(1);  // read by the mover's thread's calls
  const auto done_until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((mover->stats().moves + mover->stats().moves_failed < 2 || mover->standing_holds() != 0) &&
         std::chrono::steady_clock::now() < done_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 1u) << "the released epoch commits nothing, the next commits";
  EXPECT_EQ(s.holds_given_up, 1u) << "the released hold counted once";
  EXPECT_FALSE(s.off);
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "DDHH");
  EXPECT_TRUE(window_holds(on_device, 0, 8 * kMiB, 14));
  mover.reset();
}

TEST_F(Mover_, AMoverDestroyedWithHoldsStandingReleasesThemAndMovesNothing) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
  fill(in_host, 16 * kMiB, 8);
  MoverConfig config;
  config.holds_ahead = 3;
  make_mover(config);
  busy(in_host, 16 * kMiB);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(mover->request(in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB, 4 * kMiB, Tier::Device));
    ASSERT_CU(mover->place_epoch());
    ASSERT_CU(fill_on_stream(in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB, 2 * kMiB, 20 + i));
  }
  EXPECT_EQ(mover->standing_holds(), 3u);
  mover.reset();  // TearDown's synchronize fails if the stream was left held
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tiers(in_host, 16 * kMiB, gran), "HHHHHHHH");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_equal(in_host + static_cast<CUdeviceptr>(i) * 4 * kMiB, 2 * kMiB, 20 + i));
}

TEST_F(Mover_, AProgramsCopyDuringAHoldWaitsAtTheGateAndTheEpochCommits) {
  // A synchronous copy on the held legacy stream waits inside the driver, and there keeps every other
  // thread's calls out, the mover's too (host_wait_gate.h; the simulator models it). Passing the gate,
  // as the copy hooks do, it waits outside until the hold is released, and the epoch goes through.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 14);
  std::vector<char> pageable(kMiB, 7);
  std::thread program;
  std::atomic<bool> copied{false};
  MoverConfig config;
  config.hold_timeout = std::chrono::milliseconds(2000);
  config.inside_hold = [&] {
    program = call_at_closed_gate(
        streams.host_waits(), [&] { EXPECT_CU(drv().cuMemcpyHtoD_v2(on_device, pageable.data(), kMiB)); }, copied,
        "the copy went ahead of the hold");
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  program.join();
  EXPECT_TRUE(copied);
  const auto s = mover->stats();
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.holds_given_up, 0u) << "the program's copy kept the mover out until the watchdog";
  EXPECT_EQ(streams.host_waits().waited(), 1u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 14));
  std::vector<char> back(kMiB);
  ASSERT_CU(drv().cuMemcpyDtoH_v2(back.data(), on_device, kMiB));
  EXPECT_EQ(back, pageable);
}

TEST_F(Mover_, AProgramsMemsetsAndCopiesDuringAnEpochPassTheSubmissionGateAndAllLand) {
  // The driver resolves a memset's or a copy's addresses when it is called, not when it runs: called
  // while a commit has the range unmapped, cuMemsetD32Async and cuMemcpyDtoDAsync answer
  // CUDA_ERROR_INVALID_VALUE, and cuMemcpyAsync waits for the held work and breaks the context (H200,
  // driver 580, tests/gpu/remap_enqueue.py; queued before the remap, they land in the new pieces). The
  // simulator refuses such calls alike, and a cuStreamWriteValue32 on an unmapped word too. And a hold
  // is an event and then a wait on each stream: a copy queued between the two ran on during the remap
  // (the race detector's report). A program thread here memsets, copies and writes words into the
  // memory moving back and forth, on the held stream, passing the submission gates as the hooks do
  // (hooks/shown.h: launches the placement's, copies, memsets and memory operations the remaps' too):
  // every call must succeed, the race detector see nothing (TearDown), and the last value written be
  // there at the end.
  allocate_both_tiers();
  ASSERT_CU(drv().cuMemsetD32_v2(on_device, 0x5eed, kMiB / 4));
  // Loaded now: a lazily loaded kernel's first launch waits inside the driver behind a hold, which
  // the hooks keep away with the host-wait gate (not modeled here).
  ASSERT_CU(fill_on_stream(on_device + kMiB, kMiB, 0));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  make_mover();
  std::atomic<bool> stop{false};
  std::atomic<std::uint32_t> last{0}, last_launched{0}, last_word{0};
  std::atomic<int> refused{0};
  std::atomic<CUresult> first_refusal{CUDA_SUCCESS};
  const CUdeviceptr word = in_host + 3 * kMiB;  // a stream memory operation's (mem_op_hooks.cpp)
  std::thread program([&, context = ctx] {
    drv().cuCtxSetCurrent(context);
    for (std::uint32_t i = 1; !stop; ++i) {
      CUresult r = CUDA_SUCCESS;
      if (i % 4 == 0) {
        const uvmpool::tiering::HostWaitGate::Pass queued(streams.submissions());
        r = fill_on_stream(in_host + 2 * kMiB, kMiB, i);  // a launch: not resolved when called
        if (r == CUDA_SUCCESS) last_launched = i;
      } else {
        const uvmpool::tiering::HostWaitGate::Pass queued(streams.submissions());
        const uvmpool::tiering::HostWaitGate::Pass resolved(streams.remaps());
        r = i % 4 == 1   ? drv().cuMemsetD32Async(in_host, i, kMiB / 4, stream)
            : i % 4 == 2 ? drv().cuMemcpyDtoDAsync_v2(in_host + kMiB, on_device, kMiB, stream)
                         : drv().cuStreamWriteValue32_v2(stream, word, i, 0);
        if (r == CUDA_SUCCESS && i % 4 == 1) last = i;
        if (r == CUDA_SUCCESS && i % 4 == 3) last_word = i;
      }
      if (r != CUDA_SUCCESS && refused++ == 0) first_refusal = r;
      if (i % 16 == 0) drv().cuStreamSynchronize(stream);  // bounded queue: waits for the hold, if one stands
    }
  });
  CUresult epochs = CUDA_SUCCESS;
  for (int round = 0; round < 100 && refused == 0 && epochs == CUDA_SUCCESS; ++round) {
    EXPECT_TRUE(mover->request(in_host, 4 * kMiB, round % 2 == 0 ? Tier::Device : Tier::Host));
    // An epoch is put off (NOT_READY) when a call stays inside a gate past the patience, as a slow
    // thread may under a sanitizer: the mover's thread would try again, and so does this loop.
    for (int tries = 0; (epochs = mover->run_epoch()) == CUDA_ERROR_NOT_READY && tries < 100; ++tries) {
    }
  }
  stop = true;
  program.join();
  ASSERT_CU(epochs);
  EXPECT_EQ(refused, 0) << "a call made during a remap was refused (" << static_cast<int>(first_refusal.load()) << ")";
  const auto s = mover->stats();
  EXPECT_GE(s.moves, 2u);
  EXPECT_EQ(s.holds_given_up, 0u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(in_host, kMiB, last)) << "a memset was lost";
  EXPECT_TRUE(all_equal(in_host + kMiB, kMiB, 0x5eed)) << "a copy was lost";
  EXPECT_TRUE(all_equal(in_host + 2 * kMiB, kMiB, last_launched)) << "a launch's write was lost";
  std::uint32_t got = 0;
  ASSERT_CU(drv().cuMemcpyDtoH_v2(&got, word, sizeof got));
  EXPECT_EQ(got, last_word.load()) << "a stream memory operation's write was lost";
}

TEST_F(Mover_, ALaunchFromAnotherThreadCannotLandBetweenAHoldsEventAndItsWait) {
  // A hold is an event recorded and then a wait, on each stream. A launch another thread queues
  // between the two would run on, unseen by the event the mover waits for, while the commit remaps
  // its memory. The program's launches wait at the submission gate while the hold is placed
  // (hooks/shown.h): here a long kernel reading the memory being promoted is launched, through the
  // gate as the hooks do, just between the two; it must queue behind the wait: without the gate it
  // reaches the driver during the placement (`launched` true at once). The race detector cannot see
  // that here: the 50 ms the placement waits for the launch outlast the kernel on the virtual clock.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 21);
  busy(on_device, kMiB, 1);  // the touch kernel loaded (a first launch waits inside the driver behind a hold)
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  std::thread program;
  std::atomic<bool> launched{false};
  MoverConfig config;
  config.between_event_and_wait = [&] {
    if (program.joinable()) return;
    program = call_at_closed_gate(streams.submissions(), [&] { busy(in_host, 4 * kMiB); }, launched,
                                  "the launch went in between the hold's event and its wait");
  };
  make_mover(config);
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  if (program.joinable()) program.join();
  EXPECT_TRUE(launched);
  EXPECT_EQ(mover->stats().moves, 1u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 21));
}

TEST_F(Mover_, AHoldWaitsForACallInsideTheGateOrIsPutOff) {
  // A copy that entered the driver before the hold ends without it (its work was queued first), so
  // the mover waits for it to leave; one that stays past the hold timeout puts the epoch off, and
  // nothing is held meanwhile. Here a thread stays inside the gate for 500 ms.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 15);
  MoverConfig config;
  config.hold_timeout = std::chrono::milliseconds(200);
  make_mover(config);
  std::thread program = stay_inside_gate(std::chrono::milliseconds(500));
  EXPECT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, mover->run_epoch()) << "put off";
  EXPECT_EQ(mover->stats().moves, 0u) << "a hold was placed while a call was inside the gate";
  EXPECT_EQ(mover->stats().holds_given_up, 0u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "HH");
  program.join();
  ASSERT_CU(mover->run_epoch());  // the put-off batch, now that nothing is inside
  EXPECT_EQ(mover->stats().moves, 1u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 15));
  EXPECT_EQ(streams.host_waits().waited(), 0u);
}

TEST_F(Mover_, WithHoldsAheadACallStayingInsideTheGatePutsTheEpochOffSoonAndLeavesTheGateOpen) {
  // A call inside the gate for 600 ms (under DDP: a copy waiting for a collective that needs another
  // rank's launch, which waits at that rank's closed gate). The first hold's close gives up after the
  // gate's patience (50 ms), not the hold timeout (10 s), the epoch is put off, and the gate stays open
  // a while: a call of the program gets in without waiting.
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 16);
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold stands (as above)
  MoverConfig config;
  config.holds_ahead = 2;
  make_mover(config);
  std::thread program = stay_inside_gate(std::chrono::milliseconds(600));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, mover->place_epoch()) << "put off";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(400)) << "waited past the gate's patience";
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, mover->place_epoch()) << "the gate stays open a while";
  { const uvmpool::tiering::HostWaitGate::Pass pass(streams.host_waits()); }
  EXPECT_EQ(streams.host_waits().waited(), 0u) << "a call waited at the gate";
  program.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past the longest time the gate stays open
  ASSERT_CU(mover->place_epoch());
  ASSERT_CU(mover->complete_placed(true));
  EXPECT_EQ(mover->stats().moves, 1u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "DD");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 16));
}

TEST_F(Mover_, WorkOfADestroyedStreamStillQueuedIsWaitedFor) {
  allocate_both_tiers();
  fill(on_device, 8 * kMiB, 13);
  CUstream temporary = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&temporary, CU_STREAM_NON_BLOCKING));
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  streams.created(temporary, context, true);
  CUdeviceptr p = on_device;
  std::uint64_t bytes = 8 * kMiB;
  std::uint32_t passes = 4096, write = 0;
  void* params[] = {&p, &bytes, &passes, &write};
  ASSERT_CU(drv().cuLaunchKernel(touch_kernel, 1, 1, 1, 32, 1, 1, 0, temporary, params, nullptr));
  streams.keep_retiring();  // as a mover or an auto-mode Tiering sets it
  streams.destroying(temporary, &drv());  // as the cuStreamDestroy hook does
  ASSERT_CU(drv().cuStreamDestroy_v2(temporary));  // its kernel still runs
  make_mover();
  ASSERT_TRUE(mover->request(on_device, 8 * kMiB, Tier::Host));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(on_device, 8 * kMiB, gran), "HHHH");
  EXPECT_TRUE(holds(on_device, 8 * kMiB, 13));
}

// A destroyed stream's event, lent to a standing hold, outlives the registry's entry: placing a second
// hold once that work completed destroyed it while the first still waited on it (the simulator then
// handed the handle to the second hold's own event, behind the first hold: the first was given up at
// its timeout and its move dropped).
TEST_F(Mover_, ADestroyedStreamsEventLentToAStandingHoldIsNotDestroyedUnderIt) {
  MoverConfig config;
  config.holds_ahead = 2;
  config.hold_timeout = std::chrono::milliseconds(3000);
  make_mover(config);
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));  // loaded before any hold
  fill(in_host, 16 * kMiB, 2);
  release_idle_room();
  HostSignal gone_work, program_work;
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  CUstream temporary = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&temporary, CU_STREAM_NON_BLOCKING));
  streams.created(temporary, context, true);
  ASSERT_CU(drv().cuStreamWaitValue32_v2(temporary, gone_work.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  streams.keep_retiring();
  streams.destroying(temporary, &drv());  // its event, behind gone_work
  ASSERT_CU(drv().cuStreamDestroy_v2(temporary));
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, program_work.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());  // the first hold takes the event (not complete)
  gone_work.write(1);               // now complete
  ASSERT_TRUE(mover->request(in_host + 4 * kMiB, 4 * kMiB, Tier::Device));
  ASSERT_CU(mover->place_epoch());  // the second finds it complete: not destroyed, the first has it
  EXPECT_EQ(mover->standing_holds(), 2u);
  program_work.write(1);
  ASSERT_CU(mover->complete_placed(true));
  ASSERT_CU(mover->complete_placed(true));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  const auto s = mover->stats();
  EXPECT_EQ(s.holds_given_up, 0u);
  EXPECT_EQ(s.moves, 2u);
  EXPECT_EQ(s.moves_failed, 0u);
  EXPECT_EQ(tiers(in_host, 8 * kMiB, gran), "DDDD");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
  // Given back by the first hold, it goes at the registry's next look (a stream destroyed: `stream`,
  // listed again after, whose own event is the one left).
  EXPECT_EQ(streams.retiring_count(), 1u);
  streams.destroying(stream, &drv());
  streams.created(stream, context, true);
  EXPECT_EQ(streams.retiring_count(), 1u) << "the lent event was never given back";
}

// A first hold one stream refused after another took its wait is released at once, not waited for:
// no watchdog stands there, and work queued before it may wait for work the program queues later.
TEST_F(Mover_, APartialFirstHoldIsReleasedWithoutWaitingForItsWork) {
  allocate_both_tiers();
  ASSERT_CU(fill_on_stream(on_device, 4, 0));
  fill(in_host, 16 * kMiB, 2);
  release_idle_room();
  HostSignal signal;
  MoverConfig config;
  config.holds_ahead = 2;
  make_mover(config);
  // Work before the hold on `stream` waits for a value the program writes on the legacy stream later.
  ASSERT_CU(drv().cuStreamWaitValue32_v2(stream, signal.device, 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_TRUE(mover->request(in_host, 4 * kMiB, Tier::Device));
  ASSERT_EQ(sim().fail("cuStreamWaitValue32_v2", 2, CUDA_ERROR_UNKNOWN), 0);  // the legacy stream takes it, `stream` refuses
  std::atomic<bool> placed{false};
  std::thread placing([&] {
    (void)mover->place_epoch();
    placed = true;
  });
  EXPECT_TRUE(eventually([&] { return placed.load(); })) << "place_epoch waits for the partial hold's work";
  ASSERT_CU(drv().cuStreamWriteValue32_v2(CU_STREAM_LEGACY, signal.device, 1, 0));  // the program's later work
  placing.join();
  sim().clear_failures();
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_EQ(tiers(in_host, 4 * kMiB, gran), "HH") << "nothing moved";
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
}

// Overlapped copies with epochs placed by the launching thread (UVMPOOL_TIERING_COPY=overlap,
// UVMPOOL_TIERING_EPOCHS=launch): the mover's thread completes what the launching thread places, and
// the placement wakes it (asleep with nothing queued, it used to wait for the next request, and the
// stall guard gave the hold up after two hold timeouts).
TEST_F(Mover_, AnOrderedEpochPlacedByTheLaunchingThreadWakesTheMoversThread) {
  ASSERT_NO_FATAL_FAILURE(start_ordered_on_launch(std::chrono::milliseconds(1000)));  // the thread waits (on_launch)
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_CU(mover->place_epoch());  // as Tiering::after_launch
  const auto s = stats_once([](const uvmpool::tiering::MoverStats& m) { return m.moves == 1; }, std::chrono::seconds(1));
  EXPECT_EQ(s.moves, 1u) << "not completed within 1 s (its copy takes microseconds)";
  EXPECT_EQ(s.holds_given_up, 0u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 2));
}

// Once stopped (Tiering's exit handler), an epoch is no longer placed: nothing would complete it, and
// its gate and flag would stay as they were for good.
TEST_F(Mover_, NoEpochIsPlacedAfterTheMoverStopped) {
  ASSERT_NO_FATAL_FAILURE(start_ordered_on_launch(std::chrono::seconds(10)));
  ASSERT_CU(mover->place_epoch());
  EXPECT_EQ(wait_for_moves(1), 1u);
  mover->stop();
  ASSERT_TRUE(mover->request(in_host + 2 * kMiB, 2 * kMiB, Tier::Device));  // the policy goes on asking
  EXPECT_EQ(mover->place_epoch(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(mover->standing_holds(), 0u);
  EXPECT_FALSE(streams.host_waits().closed());
  EXPECT_FALSE(mover->copying()) << "owners published: ordered work would wait for a flag never raised";
  ASSERT_CU(drv().cuStreamSynchronize(stream));
}

TEST_F(Mover_, AGraphCapturePutsTheEpochOff) {
  REQUIRE_SIM_CONTROL(set_capture_status, "uvmpool_sim_set_capture_status");
  allocate_both_tiers();
  make_mover();
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  set_capture_status(stream, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(mover->run_epoch(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(tiers(in_host, 2 * kMiB, gran), "H");
  EXPECT_EQ(mover->stats().epochs_postponed, 1u);
  set_capture_status(stream, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(tiers(in_host, 2 * kMiB, gran), "D");
}

TEST_F(Mover_, ItsThreadCarriesRequestsOut) {
  allocate_both_tiers();
  fill(in_host, 16 * kMiB, 9);
  mover = std::make_unique<Mover>(drv(), *pool, streams, MoverConfig{});
  ASSERT_TRUE(mover->request(in_host, 2 * kMiB, Tier::Device));
  EXPECT_TRUE(eventually([&] { return mover->stats().moves == 1; }));
  mover->stop();
  EXPECT_EQ(tiers(in_host, 2 * kMiB, gran), "D");
  EXPECT_TRUE(holds(in_host, 16 * kMiB, 9));
}

TEST_F(Mover_, AFullQueueRefusesAndForeignMemoryIsRefusedByThePool) {
  make_mover();
  std::uint32_t host_word = 0;
  ASSERT_TRUE(mover->request(reinterpret_cast<CUdeviceptr>(&host_word), 4, Tier::Device));
  ASSERT_CU(mover->run_epoch());
  EXPECT_EQ(mover->stats().moves_failed, 1u);
  EXPECT_FALSE(mover->request(0, 4, Tier::Device));
  for (std::size_t i = 0; i < Mover::kMaxQueued; ++i) ASSERT_TRUE(mover->request(1, 1, Tier::Device));
  EXPECT_FALSE(mover->request(1, 1, Tier::Device));
  EXPECT_EQ(mover->stats().refused, 1u);
  ASSERT_CU(mover->run_until_idle());
}

TEST(StreamRegistry_, ListsContextsOnceAndForgetsDestroyedStreams) {
  StreamRegistry r;
  auto* c1 = reinterpret_cast<CUcontext>(0x1000);
  auto* s1 = reinterpret_cast<CUstream>(0x2000);
  auto* s2 = reinterpret_cast<CUstream>(0x3000);
  r.saw_context(c1);
  r.saw_context(c1);
  EXPECT_EQ(r.size(), 1u) << "the context's legacy stream, once";
  EXPECT_EQ(r.created(s1, c1, true).flag, 0u);
  r.created(s2, c1, false);
  const auto fenced = r.with_targets([](const std::vector<StreamRegistry::Target>& t, StreamRegistry::Hold&, auto&) {
    std::size_t n = 0;
    for (const auto& x : t) n += x.fence ? 1 : 0;
    return n;
  });
  EXPECT_EQ(fenced, 2u) << "the legacy stream and the non-blocking one; the blocking one is ordered by legacy";
  r.destroying(s1);
  EXPECT_EQ(r.size(), 2u);
  r.forget_context(c1);
  EXPECT_EQ(r.size(), 0u);
  r.saw_context(c1);  // seen again after it was forgotten: listed again
  EXPECT_EQ(r.size(), 1u);
}

}  // namespace
