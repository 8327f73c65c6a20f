// The pool's statistics (DeviceStats) add up: against the simulated driver's own call counts, against
// what the test allocated, and, in the Report that collect() makes of them, under their metric names.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>

#include "pool_test.h"
#include "stats/collect.h"
#include "stats/publisher.h"
#include "stats/shm_reader.h"

namespace pooltest {
namespace {

using uvmpool::pool::kSizeBuckets;
using uvmpool::pool::kSizeBucketNames;

class Stats : public PoolTest {};

// The bucket a request falls in, written out by hand (not with size_bucket()): 4K 64K 1M 2M 8M 32M ...
int expected_bucket(std::size_t bytes) {
  const std::size_t bounds[] = {4 * kKiB, 64 * kKiB, kMiB, 2 * kMiB, 8 * kMiB, 32 * kMiB, 128 * kMiB, 512 * kMiB,
                                2048 * kMiB};
  for (int i = 0; i < 9; ++i) {
    if (bytes <= bounds[i]) return i;
  }
  return 9;
}

TEST_F(Stats, FiguresAddUpAgainstTheDriversCallCounts) {
  auto pool = make_pool(limited_config(256 * kMiB));
  sim().reset_counts();
  const std::size_t sizes[] = {1000, 3000, 4096, 4097, 100 * kKiB, kMiB, 2 * kMiB, 3 * kMiB, 9 * kMiB, 64 * kMiB, 2 * kMiB};
  std::uint64_t by_bucket[kSizeBuckets] = {};
  std::vector<CUdeviceptr> live;
  std::uint64_t live_bytes = 0, peak_live = 0, allocations = 0, frees = 0;
  for (std::size_t bytes : sizes) {
    live.push_back(must_allocate(*pool, bytes));
    ++by_bucket[expected_bucket(bytes)];
    ++allocations;
    live_bytes += bytes;
    peak_live = std::max(peak_live, live_bytes);
  }
  // Free the 64 MiB one and allocate it again: a cache hit, no driver call.
  must_free(*pool, live[9]);
  ++frees;
  live_bytes -= 64 * kMiB;
  const unsigned long long builds_before = vmm_build_calls();
  const DeviceStats before = pool->stats(0);
  live[9] = must_allocate(*pool, 64 * kMiB);
  ++allocations;
  ++by_bucket[expected_bucket(64 * kMiB)];
  live_bytes += 64 * kMiB;
  EXPECT_EQ(vmm_build_calls(), builds_before) << "served by the freed mapping";
  EXPECT_EQ(pool->stats(0).cache_hits, before.cache_hits + 1);
  // Past the budget: refused and counted.
  CUdeviceptr refused = 0;
  EXPECT_CU_EQ(CUDA_ERROR_OUT_OF_MEMORY, pool->allocate(&refused, 300 * kMiB));

  DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.allocations, allocations);
  EXPECT_EQ(s.frees, frees);
  EXPECT_EQ(s.live_allocations, allocations - frees);
  EXPECT_EQ(s.live_bytes, live_bytes);
  EXPECT_EQ(s.peak_live_bytes, peak_live);
  EXPECT_EQ(s.peak_live_device_bytes, peak_live) << "nothing spilled";
  EXPECT_EQ(s.peak_live_host_bytes, 0u);
  EXPECT_EQ(s.out_of_memory, 1u);
  for (int i = 0; i < kSizeBuckets; ++i) EXPECT_EQ(s.allocations_by_size[i], by_bucket[i]) << "bucket <=" << kSizeBucketNames[i];
  // Every chunk or extent the pool made or gave back is one driver call (an extent counts as its
  // chunks in chunks_created), and each new mapping (stitched or a slab) one cuMemSetAccess: the six
  // small requests above fall in six slab classes.
  ASSERT_GT(s.extents_held, 0u) << "the 64 MiB allocations should be made of extents";
  EXPECT_EQ(s.chunks_created - s.extents_held * (s.extent_size / s.chunk_size - 1), sim().call_count("cuMemCreate"));
  EXPECT_EQ(s.held_bytes, s.chunks_held * s.chunk_size);
  EXPECT_EQ(s.stitched_maps + 6, sim().call_count("cuMemSetAccess"));
  EXPECT_GE(s.address_space_bytes, s.held_bytes);

  for (CUdeviceptr p : live) must_free(*pool, p);
  pool->release_idle();
  s = pool->stats(0);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.frees, s.allocations);
  EXPECT_EQ(s.chunks_held, 0u);
  EXPECT_EQ(sim().call_count("cuMemRelease"), sim().call_count("cuMemCreate"));
  EXPECT_EQ(s.chunks_released, s.chunks_created);
  EXPECT_EQ(s.extents_held, 0u);
  EXPECT_EQ(s.peak_live_bytes, peak_live) << "peaks stay";
}

// Each path counts allocations and frees in its own place (bins, slab classes, the pool's counters):
// stream-ordered ones, reused on their stream, add up with the rest.
TEST_F(Stats, StreamOrderedAllocationsAddUpWithTheRest) {
  auto pool = make_pool();
  CUstream stream = nullptr;
  ASSERT_CU(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUresult r = CUDA_SUCCESS;
  std::uint64_t allocations = 0, frees = 0;
  for (std::size_t bytes : {5 * kMiB, 2000 * std::size_t{1}, 600 * kMiB}) {
    for (int i = 0; i < 3; ++i) {  // the second and third reuse what the first freed on the stream
      CUdeviceptr p = 0;
      ASSERT_CU(pool->allocate_async(&p, bytes, stream));
      ++allocations;
      ASSERT_EQ(pool->deallocate_async(p, stream, &r), Ownership::Ours);
      ASSERT_CU(r);
      ++frees;
    }
    CUdeviceptr p = must_allocate(*pool, bytes);  // synchronous, after the stream's frees
    ++allocations;
    must_free(*pool, p);
    ++frees;
  }
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.allocations, allocations);
  EXPECT_EQ(s.frees, frees);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations_by_size[expected_bucket(5 * kMiB)], 4u);
  EXPECT_EQ(s.allocations_by_size[expected_bucket(2000)], 4u);
  EXPECT_EQ(s.allocations_by_size[expected_bucket(600 * kMiB)], 4u);
  EXPECT_GE(s.cache_hits, 4u) << "reuse on the stream and of freed mappings";
  EXPECT_EQ(s.cache_hits + s.stitched_maps, 8u) << "every large allocation is one or the other";
  drv().cuStreamDestroy_v2(stream);
}

TEST_F(Stats, CountersOffKeepOnlyWhatThePoolDecidesBy) {
  PoolConfig config = test_config();
  config.counters = false;
  auto pool = make_pool(config);
  CUdeviceptr a = must_allocate(*pool, 4 * kMiB);
  must_free(*pool, a);
  a = must_allocate(*pool, 4 * kMiB);
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(s.live_bytes, 4 * kMiB) << "the budget reads it";
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(s.frees, 0u);
  EXPECT_EQ(s.cache_hits, 0u);
  EXPECT_EQ(s.peak_live_bytes, 0u);
  EXPECT_EQ(s.stitched_maps, 1u) << "not a statistics-only figure";
  must_free(*pool, a);
}

// collect() names every DeviceStats figure once, and its values are the pool's.
TEST_F(Stats, ReportCarriesEveryFigureUnderItsName) {
  auto pool = make_pool();
  CUdeviceptr a = must_allocate(*pool, 3 * kMiB);
  CUdeviceptr b = must_allocate(*pool, 1000);
  const uvmpool::stats::Report r = uvmpool::stats::collect(pool.get());
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].device, 0);
  ASSERT_EQ(r.devices[0].values.size(), r.device_metrics.size());
  ASSERT_EQ(r.process_values.size(), r.process_metrics.size());
  std::map<std::string, int> seen;
  for (const auto& m : r.device_metrics) EXPECT_EQ(++seen[m.name + "{" + m.label + "}"], 1) << m.name << " twice";
  for (const auto& m : r.process_metrics) EXPECT_EQ(++seen["process " + m.name + "{" + m.label + "}"], 1) << m.name;
  const DeviceStats s = pool->stats(0);
  EXPECT_EQ(r.device_value(0, "live_bytes"), 3 * kMiB + 1000);
  EXPECT_EQ(r.device_value(0, "allocations"), 2u);
  EXPECT_EQ(r.device_value(0, "held_bytes"), s.held_bytes);
  EXPECT_EQ(r.device_value(0, "chunks_held"), s.chunks_held);
  EXPECT_EQ(r.device_value(0, "allocations_by_size", "size_max=4K"), 1u);
  EXPECT_EQ(r.device_value(0, "allocations_by_size", "size_max=8M"), 1u);
  EXPECT_EQ(r.device_value(0, "budget"), s.budget);
  EXPECT_EQ(r.pid, getpid());
  EXPECT_FALSE(r.command.empty());
  must_free(*pool, a);
  must_free(*pool, b);
}

// The publisher's segment, read back by uvmpool-stat's reader, holds the pool's figures; at stop
// the last figures are written and the segment removed (or kept, marked exited).
TEST_F(Stats, PublishedSegmentReadsBackAndGoesAwayAtStop) {
  auto pool = make_pool();
  const std::string dir = ::testing::TempDir() + "/uvmpool-shm-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  Pool* raw = pool.get();
  auto publisher = uvmpool::stats::Publisher::start([raw] { return uvmpool::stats::collect(raw); }, 10, dir);
  ASSERT_NE(publisher, nullptr);
  EXPECT_EQ(std::filesystem::status(publisher->path()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  CUdeviceptr a = must_allocate(*pool, 5 * kMiB);
  uvmpool::stats::Report seen;
  std::string error;
  for (int i = 0; i < 500; ++i) {  // the thread refreshes every 10 ms
    ASSERT_TRUE(uvmpool::stats::read_segment(publisher->path(), &seen, &error)) << error;
    if (!seen.devices.empty() && seen.device_value(0, "live_bytes") == 5 * kMiB) break;
    usleep(10000);
  }
  ASSERT_EQ(seen.devices.size(), 1u);
  EXPECT_EQ(seen.device_value(0, "live_bytes"), 5 * kMiB);
  EXPECT_EQ(seen.device_value(0, "held_bytes"), pool->stats(0).held_bytes);
  EXPECT_EQ(seen.pid, getpid());
  EXPECT_EQ(seen.device_metrics.size(), uvmpool::stats::device_metric_infos().size());
  const auto listed = uvmpool::stats::list_segments(false, dir);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].pid, getpid());

  must_free(*pool, a);
  const std::string path = publisher->path();
  publisher->stop(/*keep=*/true);
  ASSERT_TRUE(uvmpool::stats::read_segment(path, &seen, &error)) << error;
  EXPECT_TRUE(seen.exited);
  EXPECT_EQ(seen.device_value(0, "live_bytes"), 0u) << "the last figures are written at stop";
  std::filesystem::remove(path);

  auto again = uvmpool::stats::Publisher::start([raw] { return uvmpool::stats::collect(raw); }, 10, dir);
  ASSERT_NE(again, nullptr);
  const std::string path2 = again->path();
  again->stop();
  EXPECT_FALSE(std::filesystem::exists(path2)) << "removed at stop";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pooltest
