// Shared helpers of the pool's tests (tests/pool/). The pool reaches the driver through
// uvmpool::driver::real(), which CTest points at the simulated driver (UVMPOOL_DRIVER_PATH); these
// helpers reach the same driver the same way, plus the simulator's control API by dlsym on its
// handle (failure injection, call counts, held streams, capture status).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/real_driver.h"
#include "pool/pool.h"

namespace pooltest {

using uvmpool::driver::Table;
using uvmpool::pool::AllocationInfo;
using uvmpool::pool::DeviceStats;
using uvmpool::pool::Ownership;
using uvmpool::pool::Pool;
using uvmpool::pool::PoolConfig;

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// The driver under test (the simulator). Only valid once a PoolTest has set up.
const Table& drv();

// "CUDA_ERROR_INVALID_VALUE (1)".
std::string cu_name(CUresult r);
::testing::AssertionResult cu_equal(const char* expected_expr, const char* call_expr, CUresult expected,
                                    CUresult got);

// The simulated driver's control API (src/sim/sim_control.h), found by dlsym in the driver that
// uvmpool::driver::real() opened. hold_stream / set_capture_status are newer: nullptr when absent.
struct Sim {
  int (*fail)(const char* function, unsigned nth_call_from_now, int cuda_error) = nullptr;
  unsigned long long (*call_count)(const char* function) = nullptr;
  void (*reset_counts)() = nullptr;
  void (*clear_failures)() = nullptr;
  void* hold_stream = nullptr;         // uvmpool_sim_hold_stream(CUstream, int held)
  void* set_capture_status = nullptr;  // uvmpool_sim_set_capture_status(CUstream, int status)
};
const Sim& sim();

// Calls the optional controls (the caller has checked they exist).
void hold_stream(CUstream stream, bool held);
void set_capture_status(CUstream stream, CUstreamCaptureStatus status);

// Sum of the call counts of the VMM functions a pool uses to build memory.
unsigned long long vmm_build_calls();
// Sum of the call counts of the functions that wait for a stream's or an event's work.
unsigned long long wait_calls();

// The pool config the tests start from: no headroom (the simulated devices are small) and no
// spill (so a full budget is OUT_OF_MEMORY), the rest as the header's defaults.
PoolConfig test_config();
PoolConfig limited_config(std::size_t limit_bytes);
// limited_config with spill on: at most `host_limit_bytes` of pinned host memory (a byte figure, not
// a share of the machine, so tests do not depend on the host), a reserve of `host_reserve_bytes`.
PoolConfig spill_config(std::size_t limit_bytes, std::size_t host_limit_bytes = 128 * kMiB,
                        std::size_t host_reserve_bytes = 8 * kMiB);

// What a program passes to cuMemCreate for `device`'s memory (pinned, no handle types).
CUmemAllocationProp device_prop(int device);
// Releases a handle Pool::create_external made, as the cuMemRelease hook does: the driver first,
// then the pool.
void release_external(Pool& pool, CUmemGenericAllocationHandle handle);
// A graph capture of `stream` begun in relaxed mode (which lets the test's own calls run), the pool
// told as the hooks tell it (src/hooks/graph_hooks.cpp); and its end. Answer the driver's.
CUresult begin_capture(Pool& pool, CUstream stream);
CUresult end_capture(Pool& pool, CUstream stream);

// Pattern of an allocation: 64-bit words derived from `seed` and the offset, so two allocations with
// different seeds never look alike, and a shifted copy does not match either.
void fill(CUdeviceptr p, std::size_t bytes, std::uint64_t seed);
::testing::AssertionResult holds(CUdeviceptr p, std::size_t bytes, std::uint64_t seed);
// [p + offset, p + offset + bytes) of an allocation filled with `seed` (`fill` at p) holds its pattern.
::testing::AssertionResult window_holds(CUdeviceptr p, std::size_t offset, std::size_t bytes, std::uint64_t seed);
// Only a few windows (start, end, each chunk boundary): cheap enough to run after every step.
::testing::AssertionResult holds_sampled(CUdeviceptr p, std::size_t bytes, std::uint64_t seed,
                                         std::size_t chunk);

struct Block {
  CUdeviceptr p = 0;
  std::size_t bytes = 0;
  std::uint64_t seed = 0;
};
// No two blocks overlap (each taken as [p, p + max(bytes, 1))).
::testing::AssertionResult disjoint(std::vector<Block> blocks);

// The simulator's cuMemGetInfo for the current context.
std::size_t driver_free();
std::size_t driver_total();

// Device 0's primary context current; the sim's counts reset and failures disarmed. Tests make their
// own Pool (never Pool::process()) so every test starts from an empty pool.
class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::unique_ptr<Pool> make_pool(PoolConfig config = test_config());

  // Pool helpers that check the result (ADD_FAILURE) and answer 0 on failure.
  CUdeviceptr must_allocate(Pool& pool, std::size_t bytes);
  void must_free(Pool& pool, CUdeviceptr p);

  static CUcontext context(int device);  // device's primary context (retained once per process)
  int device_count() const;

  CUcontext ctx = nullptr;
  std::size_t gran = 0;          // the simulator's VMM granularity: the pool's default chunk size
  std::size_t total = 0;         // device 0's memory
  std::size_t free_at_start = 0; // the simulator's free bytes on device 0 when the test began
};

}  // namespace pooltest

#define ASSERT_CU(expr) ASSERT_PRED_FORMAT2(::pooltest::cu_equal, CUDA_SUCCESS, expr)
#define EXPECT_CU(expr) EXPECT_PRED_FORMAT2(::pooltest::cu_equal, CUDA_SUCCESS, expr)
#define ASSERT_CU_EQ(expected, expr) ASSERT_PRED_FORMAT2(::pooltest::cu_equal, expected, expr)
#define EXPECT_CU_EQ(expected, expr) EXPECT_PRED_FORMAT2(::pooltest::cu_equal, expected, expr)

// Skips the test when the simulator lacks one of its newer controls.
#define REQUIRE_SIM_CONTROL(member, symbol)                                                        \
  do {                                                                                             \
    if (::pooltest::sim().member == nullptr)                                                       \
      GTEST_FAIL() << "the simulated driver has no " symbol " (src/sim/sim_control.h); this "   \
                      "test needs it";                                                             \
  } while (0)
