// Moves of carved memory (src/pool/carved_moves.cpp, carved_range.h): a slot of the carved range
// changes tier whole, at its address, with every allocation in it; runs are cut at slot ends; a slot
// in host memory takes no new allocation and is given back once it holds none; the per-tier figures
// stay exact (check_invariants) through moves, frees and allocations, on one thread and on several;
// and a driver failure at every step leaves the old mapping (MoveFault, move_test.cpp, has the
// carved cases too).
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "move_test.h"

namespace pooltest {
namespace {

constexpr std::size_t kExtent = 32 * kMiB;

class CarvedMoves : public Moves {
 protected:
  // 128 MiB of device budget, carving every request up to 64 MiB from 32 MiB slots; no host reserve
  // (a move pins what it needs).
  std::unique_ptr<Pool> carving_pool(std::size_t budget = 128 * kMiB, std::size_t group = 4) {
    PoolConfig config = spill_config(budget, 256 * kMiB, 0);
    config.extent_size = kExtent;
    config.carve_max = 64 * kMiB;
    config.carve_group = group;
    auto pool = make_pool(config);
    pool->stop_background();
    return pool;
  }
  static CUdeviceptr slot_of(CUdeviceptr p) { return p / kExtent * kExtent; }
  std::string slot_tiers(CUdeviceptr p) const { return tiers(slot_of(p), kExtent, gran); }
};

TEST_F(CarvedMoves, ASlotGoesToHostAndBackWithEveryAllocationInIt) {
  auto pool = carving_pool();
  std::vector<Block> in;
  for (std::size_t bytes : {3 * kMiB, 5 * kMiB + 100, 7 * kMiB, 4 * kMiB}) {  // all in the large lane
    in.push_back({must_allocate(*pool, bytes), bytes, 40 + in.size()});
    fill(in.back().p, bytes, in.back().seed);
  }
  for (const Block& b : in) ASSERT_EQ(slot_of(b.p), slot_of(in[0].p)) << "one slot";
  std::uint64_t live = 0;
  for (const Block& b : in) live += b.bytes;

  ASSERT_CU(move(*pool, in[1].p, in[1].bytes, Tier::Host));
  EXPECT_EQ(slot_tiers(in[0].p), std::string(kExtent / gran, 'H')) << "the whole slot moved";
  for (const Block& b : in) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, live) << "every allocation in the slot is in host memory now";
  EXPECT_EQ(s.moved_to_host_bytes, kExtent);
  EXPECT_EQ(s.moved_live_to_host_bytes, live) << "of the slot's bytes, its allocations'";
  EXPECT_EQ(s.carved_mapped_bytes, 0u) << "no slot on the device";
  EXPECT_EQ(pool->check_invariants(), "");
  EXPECT_EQ(pool->find(in[1].p + 10)->base, in[1].p) << "found as before";

  // The slot's free space is withheld: a new allocation goes to a slot on the device.
  // (Large, as the slot's: a small one would go to a slot of the small lane anyway.)
  const CUdeviceptr fresh = must_allocate(*pool, 4 * kMiB);
  EXPECT_NE(slot_of(fresh), slot_of(in[0].p));
  EXPECT_EQ(tiers(fresh, 4 * kMiB, gran), "DD");
  EXPECT_EQ(pool->check_invariants(), "");

  // A free in the host slot takes its bytes off the host figure.
  must_free(*pool, in[3].p);
  live -= in[3].bytes;
  in.pop_back();
  EXPECT_EQ(pool->stats(0).live_host_bytes, live);
  EXPECT_EQ(pool->check_invariants(), "");

  ASSERT_CU(move(*pool, in[0].p, 1, Tier::Device));
  EXPECT_EQ(slot_tiers(in[0].p), std::string(kExtent / gran, 'D'));
  for (const Block& b : in) EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
  s = pool->stats(0);
  EXPECT_EQ(s.live_host_bytes, 0u);
  EXPECT_EQ(s.moved_to_device_bytes, kExtent);
  EXPECT_EQ(s.moved_live_to_device_bytes, live) << "the freed allocation's bytes moved for nothing";
  EXPECT_EQ(pool->check_invariants(), "");
  // Back on the device, the slot's free space serves again.
  const CUdeviceptr again = must_allocate(*pool, 10 * kMiB);
  EXPECT_EQ(slot_of(again), slot_of(in[0].p)) << "the slot's free space came back with it";
  must_free(*pool, again);
  must_free(*pool, fresh);
  for (const Block& b : in) must_free(*pool, b.p);
  EXPECT_EQ(pool->check_invariants(), "");
}

TEST_F(CarvedMoves, AHostSlotThatHoldsNothingIsGivenBack) {
  auto pool = carving_pool();
  const CUdeviceptr a = must_allocate(*pool, 4 * kMiB), b = must_allocate(*pool, 6 * kMiB);
  ASSERT_EQ(slot_of(a), slot_of(b));
  ASSERT_CU(move(*pool, a, 1, Tier::Host));
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, kExtent / gran);
  must_free(*pool, a);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, kExtent / gran) << "b still lies there";
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, b);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u) << "the empty host slot was kept";
  EXPECT_EQ(tiers(a, 1, gran), "?") << "unmapped";
  EXPECT_EQ(pool->check_invariants(), "");
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

// A slot whose last allocations are freed while it is demoted (a free keeps a claimed slot) lies in
// host memory holding nothing once the move commits: given back then, not at some later free.
TEST_F(CarvedMoves, ASlotEmptiedWhileItIsDemotedIsGivenBackAtTheCommit) {
  auto pool = carving_pool();
  const CUdeviceptr a = must_allocate(*pool, 4 * kMiB), b = must_allocate(*pool, 6 * kMiB);
  ASSERT_EQ(slot_of(a), slot_of(b));
  Move m;
  ASSERT_NO_FATAL_FAILURE(start_move(*pool, a, 1, Tier::Host, &m));
  must_free(*pool, a);
  must_free(*pool, b);
  ASSERT_CU(pool->commit_move(&m));
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u) << "an empty host slot kept pinned";
  EXPECT_EQ(pool->stats(0).live_host_bytes, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

// The same with a promotion aborted after the slot emptied: it stays in host memory, holding nothing.
TEST_F(CarvedMoves, ASlotEmptiedWhileItsPromotionIsAbortedIsGivenBack) {
  auto pool = carving_pool();
  const CUdeviceptr a = must_allocate(*pool, 4 * kMiB);
  ASSERT_CU(move(*pool, a, 1, Tier::Host));
  Move m;
  ASSERT_NO_FATAL_FAILURE(start_move(*pool, a, 1, Tier::Device, &m));
  must_free(*pool, a);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, kExtent / gran) << "claimed: kept while it moves";
  pool->abort_move(&m);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u) << "an empty host slot kept pinned after the abort";
  EXPECT_EQ(pool->check_invariants(), "");
}

// Under a hold (a quiesced commit) the slot cannot be unmapped, which waits for the device first; it
// is given back when placement runs short of host memory, with no carved free in between.
TEST_F(CarvedMoves, ASlotEmptiedUnderAHoldIsGivenBackWhenHostMemoryRunsShort) {
  auto pool = carving_pool();
  const CUdeviceptr a = must_allocate(*pool, 4 * kMiB);
  Move m;
  ASSERT_NO_FATAL_FAILURE(start_move(*pool, a, 1, Tier::Host, &m));
  must_free(*pool, a);
  Move* moves[] = {&m};
  CUresult results[1] = {CUDA_ERROR_UNKNOWN};
  pool->commit_quiesced(0, moves, [](std::span<char> commit) { std::fill(commit.begin(), commit.end(), 1); return true; },
                        results);
  ASSERT_CU(results[0]);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, kExtent / gran) << "under a hold: left for later";
  // Past the device budget (128 MiB) by 240 MiB: more host memory than the 256 MiB limit leaves
  // beside the slot's 32 MiB.
  const CUdeviceptr big = must_allocate(*pool, 368 * kMiB);
  EXPECT_NE(big, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, big);
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

// A carved allocation freed on a stream is taken back by the same stream without the pool's lock
// (stream_reuse.cpp): in a slot in host memory it counts as host memory again.
TEST_F(CarvedMoves, AnAllocationTakenBackOnItsStreamInAHostSlotCountsAsHost) {
  auto pool = carving_pool();
  const CUdeviceptr a = must_allocate(*pool, 4 * kMiB);
  CUdeviceptr b = 0;
  ASSERT_CU(pool->allocate_async(&b, 6 * kMiB, stream));
  ASSERT_EQ(slot_of(a), slot_of(b));
  ASSERT_CU(move(*pool, a, 1, Tier::Host));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 10 * kMiB);
  CUresult r = CUDA_ERROR_UNKNOWN;
  pool->deallocate_async(b, stream, &r);
  ASSERT_CU(r);
  EXPECT_EQ(pool->stats(0).live_host_bytes, 4 * kMiB);
  CUdeviceptr again = 0;
  ASSERT_CU(pool->allocate_async(&again, 6 * kMiB, stream));
  EXPECT_EQ(again, b) << "not taken back on its stream";
  EXPECT_EQ(pool->stats(0).live_host_bytes, 10 * kMiB);
  EXPECT_EQ(pool->check_invariants(), "");
  pool->deallocate_async(again, stream, &r);
  ASSERT_CU(r);
  must_free(*pool, a);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(pool->check_invariants(), "");
}

TEST_F(CarvedMoves, RunsEndAtSlotEndsAndEachSlotMovesOnItsOwn) {
  auto pool = carving_pool();
  const CUdeviceptr head = must_allocate(*pool, 20 * kMiB);
  const CUdeviceptr p = must_allocate(*pool, 40 * kMiB);  // from 20 MiB into the slot after next
  fill(p, 40 * kMiB, 9);
  ASSERT_NE(slot_of(p), slot_of(p + 40 * kMiB - 1));
  const auto runs = pool->runs_in_tier(p, p + 40 * kMiB, Tier::Device);
  ASSERT_EQ(runs.size(), 2u) << "one run a slot";
  EXPECT_EQ(runs[0].first, p);
  EXPECT_EQ(runs[0].first + runs[0].second, slot_of(p) + kExtent);
  EXPECT_EQ(runs[1].first + runs[1].second, p + 40 * kMiB);
  Move m;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, pool->prepare_move(p, 40 * kMiB, Tier::Host, &m)) << "past its slot";
  const auto whole = pool->whole_pieces(0, p + kMiB, p + 2 * kMiB);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->first, slot_of(p));
  EXPECT_EQ(whole->second, slot_of(p) + kExtent) << "a move carries the whole slot";

  ASSERT_CU(move(*pool, runs[1].first, runs[1].second, Tier::Host));
  EXPECT_EQ(tiers(p, 40 * kMiB, gran), std::string(6, 'D') + std::string(14, 'H'));
  EXPECT_TRUE(holds(p, 40 * kMiB, 9));
  EXPECT_EQ(pool->stats(0).live_host_bytes, p + 40 * kMiB - slot_of(runs[1].first)) << "its part in the host slot";
  EXPECT_EQ(pool->runs_in_tier(p, p + 40 * kMiB, Tier::Host).size(), 1u);
  EXPECT_EQ(pool->check_invariants(), "");
  ASSERT_CU(move(*pool, runs[0].first, runs[0].second, Tier::Host));
  EXPECT_EQ(pool->stats(0).live_host_bytes, 60 * kMiB) << "both slots: p and head";
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, p);
  must_free(*pool, head);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u);
  EXPECT_EQ(pool->check_invariants(), "");
}

// A request covering two whole new slots gets them as one group (one handle, one mapping:
// carved_range.h, "Groups"). A move of either slot moves both, since the handle maps whole, each onto
// pieces of its own; from then on each slot moves on its own.
TEST_F(CarvedMoves, AGroupMovesWholeOnceAndItsSlotsOnTheirOwnAfter) {
  auto pool = carving_pool();
  const unsigned long long maps = sim().call_count("cuMemMap");
  const CUdeviceptr p = must_allocate(*pool, 64 * kMiB);
  EXPECT_EQ(sim().call_count("cuMemMap") - maps, 1u) << "two slots, one mapping";
  ASSERT_EQ(p % kExtent, 0u);
  fill(p, 64 * kMiB, 12);
  EXPECT_EQ(pool->stats(0).extents_held, 1u) << "one handle";
  const auto whole = pool->whole_pieces(0, p + kExtent + kMiB, p + kExtent + 2 * kMiB);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->first, p);
  EXPECT_EQ(whole->second, p + 64 * kMiB) << "a move of the second slot carries the group";
  EXPECT_EQ(pool->check_invariants(), "");

  ASSERT_CU(move(*pool, p + kExtent, kExtent, Tier::Host));
  EXPECT_EQ(tiers(p, 64 * kMiB, gran), std::string(32, 'H')) << "both members moved";
  EXPECT_TRUE(holds(p, 64 * kMiB, 12));
  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.moved_to_host_bytes, 64 * kMiB);
  EXPECT_EQ(s.live_host_bytes, 64 * kMiB);
  EXPECT_EQ(s.extents_held, 0u) << "the group's handle went back to the driver";
  EXPECT_EQ(pool->check_invariants(), "");

  // The slots are slots of their own now: the first comes back alone.
  ASSERT_CU(move(*pool, p, kExtent, Tier::Device));
  EXPECT_EQ(tiers(p, 64 * kMiB, gran), std::string(16, 'D') + std::string(16, 'H'));
  EXPECT_TRUE(holds(p, 64 * kMiB, 12));
  s = pool->stats(0);
  EXPECT_EQ(s.moved_to_device_bytes, kExtent);
  EXPECT_EQ(s.live_host_bytes, kExtent);
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, p);
  EXPECT_EQ(pool->stats(0).host_chunks_mapped, 0u) << "the host slot, empty, was given back";
  EXPECT_EQ(pool->check_invariants(), "");
}

// UVMPOOL_CARVE_GROUP=1: every slot a handle of its own, and a move of one slot moves only it.
TEST_F(CarvedMoves, WithGroupsOffEachSlotIsAHandleOfItsOwn) {
  auto pool = carving_pool(128 * kMiB, 1);
  const unsigned long long maps = sim().call_count("cuMemMap");
  const CUdeviceptr p = must_allocate(*pool, 64 * kMiB);
  EXPECT_EQ(sim().call_count("cuMemMap") - maps, 2u);
  EXPECT_EQ(pool->stats(0).extents_held, 2u);
  fill(p, 64 * kMiB, 13);
  ASSERT_CU(move(*pool, p + kExtent, kExtent, Tier::Host));
  EXPECT_EQ(tiers(p, 64 * kMiB, gran), std::string(16, 'D') + std::string(16, 'H'));
  EXPECT_TRUE(holds(p, 64 * kMiB, 13));
  must_free(*pool, p);
  EXPECT_EQ(pool->check_invariants(), "");
}

TEST_F(CarvedMoves, RefusedWhileMovingAndOnceExported) {
  auto pool = carving_pool();
  const CUdeviceptr p = must_allocate(*pool, 3 * kMiB), q = must_allocate(*pool, 3 * kMiB);
  Move m, other;
  ASSERT_CU(pool->prepare_move(p, 1, Tier::Host, &m));
  EXPECT_CU_EQ(CUDA_ERROR_NOT_READY, pool->prepare_move(q, 1, Tier::Host, &other)) << " (its slot is moving)";
  // A free in a moving slot does not wait: it changes no mapping.
  must_free(*pool, q);
  pool->abort_move(&m);
  EXPECT_EQ(pool->stats(0).moves_in_flight, 0u);
  EXPECT_EQ(tiers(p, 1, gran), "D");
  ASSERT_TRUE(pool->chunks_of(p).has_value());  // what CUDA IPC's export does
  EXPECT_CU_EQ(CUDA_ERROR_NOT_PERMITTED, pool->prepare_move(p, 1, Tier::Host, &m));
  EXPECT_EQ(pool->check_invariants(), "");
  must_free(*pool, p);
}

TEST_F(CarvedMoves, ExportWaitsForAMoveOfItsSlot) {
  auto pool = carving_pool();
  const CUdeviceptr p = must_allocate(*pool, 3 * kMiB);
  fill(p, 3 * kMiB, 5);
  Move m;
  ASSERT_CU(pool->prepare_move(p, 1, Tier::Host, &m));
  ASSERT_CU(pool->copy_move(m, stream));
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  std::atomic<bool> exported{false};
  std::thread exporter([&] {
    drv().cuCtxSetCurrent(ctx);
    const auto view = pool->chunks_of(p);
    EXPECT_TRUE(view.has_value() && view->host_chunks) << "exported the old handles, which then moved";
    exported = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(exported.load()) << "exported while its slot was moving";
  ASSERT_CU(pool->commit_move(&m));
  exporter.join();
  EXPECT_TRUE(holds(p, 3 * kMiB, 5));
  must_free(*pool, p);
  EXPECT_EQ(pool->check_invariants(), "");
}

// Random carved allocations, frees (plain and on a stream) and moves of random allocations' slots to
// random tiers: the figures add up after every step, and every live allocation keeps its bytes.
TEST_F(CarvedMoves, RandomMovesAllocationsAndFreesKeepEveryFigureExact) {
  auto pool = carving_pool(96 * kMiB);
  int host_slots_seen = 0;
  RandomMoves plan;
  plan.seed = 20261130;
  plan.steps = 500;
  plan.allocate_tenths = 4;
  plan.size = [](std::mt19937_64& rng) { return rng() % 4 == 0 ? 256 + rng() % (256 * kKiB) : kMiB + rng() % (12 * kMiB); };
  plan.range = [](const Block& b, std::mt19937_64& rng) {
    const CUdeviceptr at = b.p + rng() % b.bytes;
    return std::pair<CUdeviceptr, std::size_t>{at, std::min<CUdeviceptr>(1 + rng() % kMiB, slot_of(at) + kExtent - at)};
  };
  plan.after_move = [&](Pool& p) { host_slots_seen += p.stats(0).host_chunks_mapped != 0 ? 1 : 0; };
  EXPECT_GT(random_moves(*pool, plan), 50) << "too few moves to mean anything";
  EXPECT_GT(host_slots_seen, 20) << "slots in host memory too rarely to mean anything";
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

// A mover thread moves the slots of allocations that never change while worker threads allocate and
// free carved memory beside them, in the same slots (the claim against idle-slot reuse and release,
// the withheld free space against new allocations). The workers write nothing while a move may run:
// ordering the program's writes against a move is tiering's, not the pool's (move.cpp).
TEST_F(CarvedMoves, MovesRaceAllocationsAndFreesInTheSameSlots) {
  auto pool = carving_pool(96 * kMiB);
  std::vector<Block> fixed;
  for (int i = 0; i < 6; ++i) {
    fixed.push_back({must_allocate(*pool, 5 * kMiB + 4096 * i), 5 * kMiB + 4096 * static_cast<std::size_t>(i),
                     static_cast<std::uint64_t>(700 + i)});
    fill(fixed.back().p, fixed.back().bytes, fixed.back().seed);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::thread mover([&] {
    drv().cuCtxSetCurrent(ctx);
    CUstream s = nullptr;
    ASSERT_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    std::mt19937_64 rng(11);
    while (!stop.load()) {
      const Block& b = fixed[rng() % fixed.size()];
      Move m;
      const CUresult r = pool->prepare_move(b.p, 1, rng() % 2 == 0 ? Tier::Host : Tier::Device, &m);
      if (r == CUDA_SUCCESS && m.staging != 0) {
        EXPECT_CU(pool->copy_move(m, s));
        EXPECT_CU(drv().cuStreamSynchronize(s));
        EXPECT_CU(pool->commit_move(&m));
        ++moves;
      } else if (r != CUDA_SUCCESS) {
        EXPECT_TRUE(r == CUDA_ERROR_OUT_OF_MEMORY) << cu_name(r);
      }
    }
    drv().cuStreamDestroy_v2(s);
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      drv().cuCtxSetCurrent(ctx);
      std::mt19937_64 rng(300 + w);
      std::vector<CUdeviceptr> mine;
      // Until the mover has made a few dozen moves among them (within a minute: a loaded machine).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (int i = 0; i < 300 || (moves.load() < 30 && std::chrono::steady_clock::now() < until); ++i) {
        if (!mine.empty() && (rng() % 2 == 0 || mine.size() > 8)) {
          const std::size_t k = rng() % mine.size();
          must_free(*pool, mine[k]);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        CUdeviceptr p = 0;
        if (pool->allocate(&p, 256 + rng() % (3 * kMiB)) == CUDA_SUCCESS) mine.push_back(p);
      }
      for (CUdeviceptr p : mine) must_free(*pool, p);
    });
  }
  for (std::thread& t : workers) t.join();
  stop = true;
  mover.join();
  EXPECT_GE(moves.load(), 30);
  for (const Block& b : fixed) {
    EXPECT_TRUE(holds(b.p, b.bytes, b.seed));
    must_free(*pool, b.p);
  }
  EXPECT_EQ(pool->check_invariants(), "");
  pool.reset();
  EXPECT_TRUE(host_memory_whole());
}

}  // namespace
}  // namespace pooltest
