// Random sequences of pool operations under a tight budget, with the pool's invariants checked after
// every step. Deterministic per seed; a failure prints the seed, the step and the last operations.
// Replay one seed with UVMPOOL_POOL_TEST_SEED=<seed> (the test's parameter is then ignored).
//
// Invariants: live allocations never overlap; their bytes read back (sampled windows after every
// step, every byte every 25 steps and at the end); find() answers each one's base and size; the
// stats add up (live bytes and count, held <= budget, free + cached <= held, peaks); what the driver
// has lent equals what the pool says it holds; memory_info's total is the budget and its free no
// more than the budget less what is live; and a request is refused only when the budget really
// cannot take it (free, cached and unheld chunks together are too few).
#include <cstdlib>
#include <deque>
#include <random>
#include <sstream>

#include "pool_test.h"

namespace pooltest {
namespace {

class RandomOps : public PoolTest, public ::testing::WithParamInterface<std::uint64_t> {
 protected:
  static constexpr std::size_t kLimit = 40 * kMiB;
  static constexpr int kSteps = 400;

  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    for (CUstream& s : streams) ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    others = total - free_at_start;
    pool = make_pool(limited_config(kLimit));
  }
  void TearDown() override {
    for (CUstream s : streams)
      if (s != nullptr) {
        if (sim().hold_stream != nullptr) hold_stream(s, false);
        drv().cuStreamDestroy_v2(s);
      }
    pool.reset();
    PoolTest::TearDown();
  }

  std::string history() const {
    std::ostringstream out;
    out << "seed " << seed << ", last operations:";
    for (const std::string& op : ops) out << "\n    " << op;
    return out.str();
  }
  void note(std::string op) {
    ops.push_back(std::to_string(step) + ": " + std::move(op));
    if (ops.size() > 12) ops.pop_front();
  }

  std::size_t random_size() {
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 45) return 1 + rng() % 4096;
    if (kind < 65) return 4096 + rng() % kMiB;
    if (kind < 90) return (1 + rng() % 3) * gran + rng() % 3 * 4096 - 2048 * (rng() % 2);
    return (3 + rng() % 8) * gran - rng() % 1000;
  }

  // Chunks the budget could still give a request: the budget less others' memory and the chunks
  // in use (held chunks neither free nor cached).
  std::size_t available_chunks(const DeviceStats& s) const {
    const std::size_t in_use = (s.chunks_held - s.chunks_free - s.chunks_cached) * s.chunk_size;
    const std::size_t used = in_use + others;
    return used >= kLimit ? 0 : (kLimit - used) / s.chunk_size;
  }

  void allocate_one() {
    const std::size_t bytes = random_size();
    const int how = static_cast<int>(rng() % 4);  // 0, 1: sync; 2: a stream; 3: the default stream
    CUstream s = how == 2 ? streams[rng() % 2] : nullptr;
    const DeviceStats before = pool->stats(0);
    CUdeviceptr p = 0;
    const CUresult r = how < 2 ? pool->allocate(&p, bytes) : pool->allocate_async(&p, bytes, s);
    note((how < 2 ? "allocate " : "allocate_async ") + std::to_string(bytes) + " -> " + cu_name(r));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      const std::size_t needed = bytes > before.chunk_size / 2 ? (bytes + gran - 1) / gran : 1;
      if (!held) {
        EXPECT_LT(available_chunks(before), needed)
            << bytes << " bytes refused with " << available_chunks(before) << " chunks available ("
            << before.chunks_held << " held, " << before.chunks_free << " free, " << before.chunks_cached
            << " cached)\n" << history();
      }
      EXPECT_EQ(pool->stats(0).out_of_memory, before.out_of_memory + 1);
      return;
    }
    ASSERT_CU(r) << "\n" << history();
    const std::uint64_t block_seed = (seed << 32) + static_cast<std::uint64_t>(step);
    fill(p, bytes, block_seed);
    live.push_back({p, bytes, block_seed});
  }

  void free_one() {
    const std::size_t i = rng() % live.size();
    const Block b = live[i];
    live[i] = live.back();
    live.pop_back();
    ASSERT_TRUE(holds(b.p, b.bytes, b.seed)) << history();
    const bool async = rng() % 3 == 0;
    CUstream s = async ? (rng() % 3 ? streams[rng() % 2] : nullptr) : nullptr;
    CUresult r = CUDA_ERROR_UNKNOWN;
    const Ownership o = async ? pool->deallocate_async(b.p, s, &r) : pool->deallocate(b.p, &r);
    note((async ? "deallocate_async " : "deallocate ") + std::to_string(b.bytes));
    ASSERT_EQ(o, Ownership::Ours) << history();
    ASSERT_CU(r) << "\n" << history();
    freed.push_back(b.p);
    if (freed.size() > 32) freed.erase(freed.begin());
  }

  void bad_free() {
    const DeviceStats before = pool->stats(0);
    CUresult r = CUDA_SUCCESS;
    if (!live.empty() && rng() % 2) {  // an interior pointer of a live allocation
      const Block& b = live[rng() % live.size()];
      if (b.bytes < 2) return;
      const CUdeviceptr q = b.p + 1 + rng() % (b.bytes - 1);
      note("deallocate interior pointer");
      EXPECT_EQ(pool->deallocate(q, &r), Ownership::Ours) << history();
      EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "\n" << history();
    } else if (!freed.empty()) {  // a stale pointer that is no live allocation's base
      const CUdeviceptr q = freed[rng() % freed.size()];
      for (const Block& b : live)
        if (b.p == q) return;
      note("deallocate stale pointer");
      if (pool->deallocate(q, &r) == Ownership::Ours) {
        EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, r) << "\n" << history();
      }
    } else {
      return;
    }
    const DeviceStats after = pool->stats(0);
    EXPECT_EQ(after.live_allocations, before.live_allocations) << history();
    EXPECT_EQ(after.live_bytes, before.live_bytes) << history();
    EXPECT_EQ(after.chunks_held, before.chunks_held) << history();
  }

  void check(bool every_byte) {
    ASSERT_TRUE(disjoint(live)) << history();
    std::size_t sum = 0;
    for (const Block& b : live) {
      sum += b.bytes;
      ASSERT_TRUE(every_byte ? holds(b.p, b.bytes, b.seed) : holds_sampled(b.p, b.bytes, b.seed, gran)) << history();
      auto info = pool->find(b.p + b.bytes - 1);
      ASSERT_TRUE(info.has_value()) << history();
      EXPECT_EQ(info->base, b.p) << history();
      EXPECT_EQ(info->size, b.bytes) << history();
    }
    EXPECT_EQ(pool->check_invariants(), "") << history();
    const DeviceStats s = pool->stats(0);
    EXPECT_EQ(s.live_bytes, sum) << history();
    EXPECT_EQ(s.live_allocations, live.size()) << history();
    EXPECT_LE(s.chunks_held * s.chunk_size, kLimit) << history();
    EXPECT_LE(s.chunks_free + s.chunks_cached, s.chunks_held) << history();
    EXPECT_GE(s.peak_live_bytes, s.live_bytes) << history();
    EXPECT_GE(s.peak_held_bytes, s.chunks_held * s.chunk_size) << history();
    EXPECT_EQ(s.budget, kLimit);
    EXPECT_EQ(free_at_start - driver_free(), s.chunks_held * s.chunk_size)
        << "the driver has lent the pool more (or less) than it says it holds\n" << history();
    std::size_t free = 0, tot = 0;
    ASSERT_CU(pool->memory_info(&free, &tot));
    EXPECT_EQ(tot, kLimit);
    EXPECT_LE(free + sum + others, kLimit) << history();
  }

  std::unique_ptr<Pool> pool;
  CUstream streams[2] = {nullptr, nullptr};
  std::vector<Block> live;
  std::vector<CUdeviceptr> freed;
  std::deque<std::string> ops;
  std::mt19937_64 rng;
  std::uint64_t seed = 0;
  std::size_t others = 0;
  int step = 0;
  bool held = false;
};

TEST_P(RandomOps, InvariantsHoldAfterEveryStep) {
  seed = GetParam();
  if (const char* forced = std::getenv("UVMPOOL_POOL_TEST_SEED")) seed = std::strtoull(forced, nullptr, 10);
  rng.seed(seed);
  RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: UVMPOOL_POOL_TEST_SEED=" + std::to_string(seed) + ")");
  const bool can_hold = sim().hold_stream != nullptr;
  for (step = 0; step < kSteps && !HasFailure(); ++step) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 45 || live.empty()) {
      allocate_one();
    } else if (op < 88) {
      free_one();
    } else if (op < 92) {
      note("release_idle");
      pool->release_idle();
    } else if (op < 96) {
      bad_free();
    } else if (can_hold) {
      held = !held;
      note(held ? "hold stream 0" : "release stream 0");
      hold_stream(streams[0], held);
    }
    if (HasFailure()) break;
    check(step % 25 == 0);
  }
  if (held) hold_stream(streams[0], false);
  check(true);
  while (!live.empty() && !HasFailure()) free_one();
  pool->release_idle();
  EXPECT_EQ(pool->stats(0).chunks_held, 0u) << history();
  EXPECT_EQ(driver_free(), free_at_start) << history();
}

INSTANTIATE_TEST_SUITE_P(Pool, RandomOps, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "Seed" + std::to_string(info.param); });

}  // namespace
}  // namespace pooltest
