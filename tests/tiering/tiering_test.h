// The fixture of tiering's tests on the simulated driver: a pool spilling into host memory past a
// 64 MiB budget, the simulator's kernel module, a non-blocking stream, and allocations freed at the
// end, with the pool's invariants and the race detector checked then.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "spill_test.h"  // first: the driver's declarations come before cuda.h's
#include "sim/sim_control.h"
#include "tiering/tiering.h"

namespace pooltest {

// Violations the simulator's race detector found (sim_control.h), or ~0 without one.
inline unsigned long long race_violations() {
  using Violations = unsigned long long (*)();
  auto violations = reinterpret_cast<Violations>(uvmpool::driver::real_symbol("uvmpool_sim_violations"));
  return violations != nullptr ? violations() : ~0ull;
}

class TieringTest : public SpillTest {
 protected:
  static constexpr std::size_t kBudget = 64 * kMiB;

  void SetUp() override {
    SpillTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(race_violations(), 0u);
    pool = make_pool(spill_config(kBudget));
    ASSERT_CU(drv().cuModuleLoadData(&module, UVMPOOL_SIM_MODULE_IMAGE));
    ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }
  // Derived fixtures drop what uses the pool first, then call this.
  void TearDown() override {
    if (stream != nullptr) {
      EXPECT_CU(drv().cuStreamSynchronize(stream)) << "the stream's work failed, or it was left held";
      drv().cuStreamDestroy_v2(stream);
    }
    if (module != nullptr) drv().cuModuleUnload(module);
    for (CUdeviceptr p : allocated) must_free(*pool, p);
    if (pool) {
      EXPECT_EQ(pool->stats(0).moves_in_flight, 0u);
      EXPECT_EQ(pool->check_invariants(), "");
    }
    pool.reset();
    EXPECT_EQ(race_violations(), 0u) << "the race detector saw memory change under unfinished work";
    SpillTest::TearDown();
  }

  CUfunction kernel(const char* name) {
    CUfunction f = nullptr;
    EXPECT_CU(drv().cuModuleGetFunction(&f, module, name)) << name;
    return f;
  }
  // Whether every 32-bit word of [p, p + bytes) reads `value`.
  static ::testing::AssertionResult all_equal(CUdeviceptr p, std::size_t bytes, std::uint32_t value) {
    std::vector<std::uint32_t> got(bytes / 4);
    if (const CUresult r = drv().cuMemcpyDtoH_v2(got.data(), p, bytes); r != CUDA_SUCCESS)
      return ::testing::AssertionFailure() << "cuMemcpyDtoH answered " << cu_name(r);
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != value) return ::testing::AssertionFailure() << "word " << i << " reads " << got[i] << ", not " << value;
    return ::testing::AssertionSuccess();
  }
  // A pool allocation freed at the end.
  CUdeviceptr allocate(std::size_t bytes) {
    const CUdeviceptr p = must_allocate(*pool, bytes);
    if (p != 0) allocated.push_back(p);
    return p;
  }

  std::unique_ptr<Pool> pool;
  CUmodule module = nullptr;
  CUstream stream = nullptr;
  std::vector<CUdeviceptr> allocated;
};

// Tests that run the policy and the mover on the launching thread: `tiering` (made by the test)
// shown each launch of uvmpool_touch as the launch hooks show it, on the fixture's stream, listed as
// the cuStreamCreate hook lists it.
class LaunchedTest : public TieringTest {
 protected:
  void SetUp() override {
    TieringTest::SetUp();
    if (HasFatalFailure()) return;
    pool->stop_background();
    touch = kernel("uvmpool_touch");
    CUcontext context = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&context));
    streams.created(stream, context, true);
  }
  void TearDown() override {
    tiering.reset();
    streams.destroying(stream);
    TieringTest::TearDown();
  }
  // uvmpool_touch over [p, p + bytes), `passes` times (the simulator charges each pass), straight to
  // the driver.
  CUresult read(CUdeviceptr p, std::uint64_t bytes, std::uint32_t passes) {
    std::uint32_t write = 0;
    void* params[] = {&p, &bytes, &passes, &write};
    return drv().cuLaunchKernel(touch, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
  }
  // The same through tiering as the launch hooks show it, the mover polled after.
  void read_shown(CUdeviceptr p, std::uint64_t bytes, std::uint32_t passes) {
    std::uint32_t write = 0;
    void* params[] = {&p, &bytes, &passes, &write};
    uvmpool::tiering::LaunchSeen seen;
    tiering->before_launch(touch, stream, params, nullptr, &seen);
    EXPECT_CU(drv().cuLaunchKernel(touch, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
    tiering->after_launch(seen, stream);
    tiering->mover().poll();
  }
  // The end of a period: the standing holds completed, the stream synchronized.
  void end_period() {
    while (tiering->mover().standing_holds() > 0) tiering->mover().complete_placed(true);
    EXPECT_CU(drv().cuStreamSynchronize(stream));
  }
  // Frees allocations of the test's (the tiering first, which may be moving them).
  void free_all(std::vector<CUdeviceptr>& mine) {
    tiering.reset();
    for (CUdeviceptr p : mine) {
      must_free(*pool, p);
      std::erase(allocated, p);
    }
    mine.clear();
  }

  uvmpool::tiering::StreamRegistry streams;
  std::unique_ptr<uvmpool::tiering::Tiering> tiering;
  CUfunction touch = nullptr;
};

}  // namespace pooltest
