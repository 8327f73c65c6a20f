// The fixture of the move suites (move_test.cpp, carved_moves_test.cpp): the spill machine, a
// stream for the copies, the race detector asked at the end of every test, and the steps of a move
// in order.
#pragma once

#include <functional>
#include <random>
#include <utility>

#include "spill_test.h"

namespace pooltest {

using uvmpool::pool::Chunk;
using uvmpool::pool::Move;
using uvmpool::pool::Tier;

class Moves : public SpillTest {
 protected:
  void SetUp() override {
    SpillTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    if (stream != nullptr) drv().cuStreamDestroy_v2(stream);
    // No move remapped memory under unfinished work (the simulator's race detector).
    using Violations = unsigned long long (*)();
    auto violations = reinterpret_cast<Violations>(uvmpool::driver::real_symbol("uvmpool_sim_violations"));
    EXPECT_NE(violations, nullptr) << "the simulated driver has no uvmpool_sim_violations";
    if (violations != nullptr) {
      EXPECT_EQ(violations(), 0u) << "the race detector saw memory change under work";
    }
    SpillTest::TearDown();
  }

  // The steps in order, the copy waited for; a failing copy or commit aborts.
  CUresult move(Pool& pool, CUdeviceptr p, std::size_t bytes, Tier to) {
    Move m;
    CUresult r = pool.prepare_move(p, bytes, to, &m);
    if (r != CUDA_SUCCESS) return r;
    r = pool.copy_move(m, stream);
    if (r == CUDA_SUCCESS) r = drv().cuStreamSynchronize(stream);
    if (r == CUDA_SUCCESS) r = pool.commit_move(&m);
    if (r != CUDA_SUCCESS) pool.abort_move(&m);
    return r;
  }

  // A move prepared and its copy waited for, the commit left to the test (ASSERTs: call it under
  // ASSERT_NO_FATAL_FAILURE).
  void start_move(Pool& pool, CUdeviceptr p, std::size_t bytes, Tier to, Move* m) {
    ASSERT_CU(pool.prepare_move(p, bytes, to, m));
    ASSERT_CU(pool.copy_move(*m, stream));
    ASSERT_CU(drv().cuStreamSynchronize(stream));
  }

  // Allocated on `s`, then `s` held (the simulator's control) and the allocation freed on it: an
  // open free whose work has not ended.
  void free_open_on(Pool& pool, CUstream s, std::size_t bytes, CUdeviceptr* p) {
    ASSERT_CU(pool.allocate_async(p, bytes, s));
    hold_stream(s, true);
    CUresult r = CUDA_ERROR_UNKNOWN;
    ASSERT_EQ(pool.deallocate_async(*p, s, &r), Ownership::Ours);
    ASSERT_CU(r);
  }

  // No extents: memory in chunks on both tiers (a host run is made of host chunks; a host extent is
  // never cut as one), the default host limit and reserve, no background thread.
  std::unique_ptr<Pool> chunks_pool() {
    PoolConfig config = spill_config(128 * kMiB);
    config.extent_size = 0;
    auto pool = make_pool(config);
    pool->stop_background();
    return pool;
  }

  // 32 MiB extents, no host reserve (the host tier pins what a move needs), no background thread.
  std::unique_ptr<Pool> extents_pool() {
    PoolConfig config = spill_config(128 * kMiB, 128 * kMiB, 0);
    config.extent_size = 32 * kMiB;
    auto pool = make_pool(config);
    pool->stop_background();
    return pool;
  }

  // A random run of allocations, frees (plain and on a stream) and moves of ranges of live
  // allocations to random tiers: the figures add up after every step and every live allocation
  // keeps its bytes; at the end everything is freed. Answers the moves made.
  struct RandomMoves {
    std::uint64_t seed = 1;
    int steps = 400;
    int allocate_tenths = 3;  // of the steps (then two tenths free, the rest move)
    std::function<std::size_t(std::mt19937_64&)> size;
    std::function<std::pair<CUdeviceptr, std::size_t>(const Block&, std::mt19937_64&)> range;  // what to move
    std::function<void(Pool&)> after_move;  // optional
  };
  int random_moves(Pool& pool, const RandomMoves& plan) {
    std::mt19937_64 rng(plan.seed);
    std::vector<Block> live;
    std::uint64_t seed = plan.seed * 1000;
    int moved = 0;
    for (int step = 0; step < plan.steps && !HasFailure(); ++step) {
      const std::string when = "step " + std::to_string(step);
      const int op = static_cast<int>(rng() % 10);
      if (op < plan.allocate_tenths || live.empty()) {
        const std::size_t bytes = plan.size(rng);
        CUdeviceptr p = 0;
        if (pool.allocate(&p, bytes) != CUDA_SUCCESS) continue;  // both tiers full: fine
        fill(p, bytes, ++seed);
        live.push_back({p, bytes, seed});
      } else if (op < plan.allocate_tenths + 2) {
        const std::size_t i = rng() % live.size();
        EXPECT_TRUE(holds_sampled(live[i].p, live[i].bytes, live[i].seed, gran)) << when;
        CUresult r = CUDA_ERROR_UNKNOWN;
        if (rng() % 2 == 0) {
          pool.deallocate(live[i].p, &r);
        } else {
          pool.deallocate_async(live[i].p, stream, &r);
        }
        EXPECT_CU(r) << when;
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const Block& b = live[rng() % live.size()];
        const auto [at, length] = plan.range(b, rng);
        const Tier to = rng() % 2 == 0 ? Tier::Host : Tier::Device;
        const CUresult r = move(pool, at, length, to);
        // Both tiers in the range (or a slab's chunk), or no room in the target: refused, nothing changed.
        if (r != CUDA_SUCCESS) {
          EXPECT_TRUE(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_OUT_OF_MEMORY) << when << ": " << cu_name(r);
        } else {
          ++moved;
        }
        if (plan.after_move) plan.after_move(pool);
        EXPECT_TRUE(holds_sampled(b.p, b.bytes, b.seed, gran)) << when;
      }
      EXPECT_CU(drv().cuStreamSynchronize(stream));
      EXPECT_EQ(pool.check_invariants(), "") << when;
    }
    const DeviceStats s = pool.stats(0);
    EXPECT_GT(s.moved_to_host_bytes, 0u);
    EXPECT_GT(s.moved_to_device_bytes, 0u);
    for (const Block& b : live) {
      EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
      must_free(pool, b.p);
    }
    EXPECT_EQ(pool.check_invariants(), "");
    return moved;
  }

  CUstream stream = nullptr;
};

// The copy of [p, p + bytes) in a prepared move's staging mappings (one per new piece) holds `seed`'s
// pattern, as the allocation at p does.
inline ::testing::AssertionResult staged_holds(const Move& m, CUdeviceptr p, std::size_t bytes, std::uint64_t seed) {
  CUdeviceptr at = m.address;
  for (const Chunk& piece : m.target) {
    const CUdeviceptr next = at + piece.granules * m.chunk_size;
    const CUdeviceptr lo = std::max(at, p), hi = std::min<CUdeviceptr>(next, p + bytes);
    if (lo < hi) {
      if (auto r = window_holds(m.staging_of(lo) - (lo - p), lo - p, hi - lo, seed); !r) return r;
    }
    at = next;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pooltest
