// uvmpool-bench-stitch: one cold 1 GiB allocation, from free memory in extents and stitched from free
// chunks scattered over the pool. Targets (pool v2): at most 1.5 ms from extents (GMLake reported
// about 40 ms for 954 MB), at most 1.2x the driver floor from scattered chunks.
// The scattered variants: each repetition builds a fresh pool, fills it with chunk-sized allocations,
// frees every other one, and times the next 1 GiB allocation. The pool takes idle chunks before it
// creates any, so that allocation is built from the scattered chunks; the pool's counters for the
// timed call are printed to show it.
//
// The freed chunk-sized allocations stay in the pool's mapping cache as 1-chunk mappings. Two
// variants are timed:
// - "free": first Pool::release_idle(keep_chunks = true) takes the cached mappings apart, keeping
//   their chunks, so the timed call only stitches scattered free chunks: the 1.2x target's figure.
// - "cached": as is. The timed call also takes the 1-chunk mappings apart (a cuMemUnmap each).
// References: the same allocation from an empty pool (extents created on the spot, UVMPOOL_EXTENT_SIZE;
// and, to compare, with extents off: chunks created), and cuMemAlloc. On the simulated driver each
// timed call's modeled time (the virtual clock, H200-calibrated costs) is printed beside the wall
// time, which says nothing about a GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_common.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTargetSeconds = 1.5e-3;  // from free memory in extents
constexpr double kFloorRatio = 1.2;        // from scattered free chunks, against the driver floor

struct Setup {
  std::uint64_t bytes = 0;  // the timed allocation
  std::uint64_t chunk = 0;
  std::uint64_t fill_chunks = 0;  // chunk-sized allocations made before; every other one is freed
  int device = 0;
};
Setup g;

struct Counters {  // the pool's counters across the timed call, last repetition
  std::uint64_t broken = 0, built = 0, created = 0, hits = 0;
};
Counters g_cached, g_free;
// Modeled seconds of each variant's timed call, last repetition (simulated driver only; else negative).
double g_modeled_free = -1, g_modeled_cached = -1, g_modeled_empty = -1, g_modeled_empty_chunks = -1, g_modeled_floor = -1,
       g_modeled_empty_carved = -1;

// The pool as the options say, with carving off: this measures stitching (UVMPOOL_CARVE_MAX would
// carve the scattered layout's allocations into shared extents, leaving no free chunks to stitch).
pool::PoolConfig stitching_config() {
  pool::PoolConfig config = pool::PoolConfig::from_options(config::options());
  config.carve_max = 0;
  return config;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void scattered(benchmark::State& state, bool evict_first, Counters* counters, double* modeled) {
  for (auto _ : state) {
    auto pool = std::make_unique<pool::Pool>(drv(), stitching_config());
    std::vector<CUdeviceptr> fill(g.fill_chunks, 0);
    CUresult result = CUDA_SUCCESS;
    for (CUdeviceptr& p : fill)
      if (pool->allocate(&p, g.chunk) != CUDA_SUCCESS) return state.SkipWithError("filling the pool failed");
    for (std::size_t i = 0; i < fill.size(); i += 2) pool->deallocate(fill[i], &result), fill[i] = 0;
    if (evict_first) {
      pool->release_idle(/*keep_chunks=*/true);
      const pool::DeviceStats s = pool->stats(g.device);
      if (s.chunks_cached != 0 || s.chunks_free * g.chunk < g.bytes)
        return state.SkipWithError("release_idle(keep_chunks) did not turn cached mappings into free chunks");
    }

    const pool::DeviceStats before = pool->stats(g.device);
    CUdeviceptr big = 0;
    const double modeled_start = modeled_now();
    const Clock::time_point start = Clock::now();
    const CUresult status = pool->allocate(&big, g.bytes);
    const double elapsed = seconds_since(start);
    if (modeled_start >= 0) *modeled = modeled_now() - modeled_start;
    if (status != CUDA_SUCCESS) return state.SkipWithError("the stitched allocation failed");
    const pool::DeviceStats after = pool->stats(g.device);
    *counters = {after.mappings_broken - before.mappings_broken, after.stitched_maps - before.stitched_maps,
                 after.chunks_created - before.chunks_created, after.cache_hits - before.cache_hits};
    state.SetIterationTime(elapsed);

    pool->deallocate(big, &result);
    for (CUdeviceptr p : fill)
      if (p != 0) pool->deallocate(p, &result);
  }
}

// How the empty pool serves the request: stitched from extents it makes, stitched from chunks it
// makes (extents off), or carved as the options say (the default: slots a request covers whole are
// groups of one handle each, src/pool/carved_range.h).
enum class Empty { Extents, Chunks, Carved };

void empty_pool(benchmark::State& state, Empty how, double* modeled) {
  for (auto _ : state) {
    pool::PoolConfig config = how == Empty::Carved ? pool::PoolConfig::from_options(config::options()) : stitching_config();
    if (how == Empty::Chunks) config.extent_size = 0;
    pool::Pool pool(drv(), config);
    CUdeviceptr big = 0;
    CUresult result = CUDA_SUCCESS;
    const double modeled_start = modeled_now();
    const Clock::time_point start = Clock::now();
    const CUresult status = pool.allocate(&big, g.bytes);
    const double elapsed = seconds_since(start);
    if (modeled_start >= 0) *modeled = modeled_now() - modeled_start;
    if (status != CUDA_SUCCESS) return state.SkipWithError("Pool::allocate failed");
    state.SetIterationTime(elapsed);
    pool.deallocate(big, &result);
  }
}

// The floor for any allocator built on the VMM API: the driver calls that make the same 1 GiB
// mapping from chunks that already exist (a cuMemMap per chunk, one cuMemSetAccess over the range).
// Chunks and the address range are made before the clock starts; only the mapping is timed.
void driver_floor(benchmark::State& state) {
  const driver::Table& d = drv();
  const std::uint64_t n = (g.bytes + g.chunk - 1) / g.chunk, bytes = n * g.chunk;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g.device;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> chunks(n);
  for (auto& h : chunks)
    if (d.cuMemCreate(&h, g.chunk, &prop, 0) != CUDA_SUCCESS) return state.SkipWithError("cuMemCreate failed");
  CUdeviceptr va = 0;
  if (d.cuMemAddressReserve(&va, bytes, 0, 0, 0) != CUDA_SUCCESS) return state.SkipWithError("cuMemAddressReserve failed");
  for (auto _ : state) {
    const double modeled_start = modeled_now();
    const Clock::time_point start = Clock::now();
    for (std::uint64_t i = 0; i < n; ++i)
      if (d.cuMemMap(va + i * g.chunk, g.chunk, 0, chunks[i], 0) != CUDA_SUCCESS) return state.SkipWithError("cuMemMap failed");
    if (d.cuMemSetAccess(va, bytes, &access, 1) != CUDA_SUCCESS) return state.SkipWithError("cuMemSetAccess failed");
    state.SetIterationTime(seconds_since(start));
    if (modeled_start >= 0) g_modeled_floor = modeled_now() - modeled_start;
    d.cuMemUnmap(va, bytes);
  }
  d.cuMemAddressFree(va, bytes);
  for (auto h : chunks) d.cuMemRelease(h);
}

void native(benchmark::State& state) {
  for (auto _ : state) {
    CUdeviceptr p = 0;
    const Clock::time_point start = Clock::now();
    const CUresult status = drv().cuMemAlloc_v2(&p, g.bytes);
    const double elapsed = seconds_since(start);
    if (status != CUDA_SUCCESS) return state.SkipWithError("cuMemAlloc failed");
    state.SetIterationTime(elapsed);
    drv().cuMemFree_v2(p);
  }
}

std::string counters_text(const Counters& c) {
  return std::to_string(c.broken) + " cached mappings taken apart, " + std::to_string(c.built) +
         " mapping(s) built, " + std::to_string(c.created) + " chunks created, " + std::to_string(c.hits) +
         " cache hits";
}

}  // namespace

int main(int argc, char** argv) {
  // The "free" variant's deliberate out-of-memory would log a warning each repetition.
  setenv("UVMPOOL_LOG_LEVEL", "error", 0);
  Options options("uvmpool-bench-stitch", "cold stitched allocation from scattered free chunks");
  options.add("size", "1G", "the timed allocation");
  options.add("fill-chunks", "0", "chunk-sized allocations made first (0: twice the chunks of --size)");
  options.add("reps", "7", "repetitions (each a fresh pool); the median is reported");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);

  const Device device = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-stitch", device);
  g.device = device.device;
  g.chunk = device.granularity;
  g.bytes = options.size("size");
  const std::uint64_t needed = (g.bytes + g.chunk - 1) / g.chunk;
  g.fill_chunks = options.integer("fill-chunks") > 0 ? options.integer("fill-chunks") : 2 * needed;
  if ((g.fill_chunks + 1) / 2 < needed) {
    std::fprintf(stderr, "--fill-chunks=%llu frees too few chunks for --size\n",
                 static_cast<unsigned long long>(g.fill_chunks));
    return 2;
  }
  const int reps = static_cast<int>(options.integer("reps"));

  // One iteration per repetition: each is a cold allocation in a fresh pool, timed by hand.
  auto add = [&](const char* name, auto&& fn, auto&&... args) {
    benchmark::RegisterBenchmark(name, fn, args...)
        ->UseManualTime()
        ->Iterations(1)
        ->Repetitions(reps)
        ->ReportAggregatesOnly(true)
        ->Unit(benchmark::kMillisecond);
  };
  add("scattered_free", scattered, true, &g_free, &g_modeled_free);
  add("scattered_cached", scattered, false, &g_cached, &g_modeled_cached);
  add("empty_pool", empty_pool, Empty::Extents, &g_modeled_empty);
  add("empty_pool_chunks_only", empty_pool, Empty::Chunks, &g_modeled_empty_chunks);
  add("empty_pool_carved", empty_pool, Empty::Carved, &g_modeled_empty_carved);
  add("native", native);
  add("driver_floor", driver_floor);
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);

  const double free_chunks = recorder.seconds("scattered_free");
  const double cached = recorder.seconds("scattered_cached");
  const double empty = recorder.seconds("empty_pool");
  const double driver_alloc = recorder.seconds("native");
  const double floor_s = recorder.seconds("driver_floor");
  const std::string scattered_chunks = std::to_string((g.fill_chunks + 1) / 2) + " scattered ";
  Figures figures("cold " + format_size(g.bytes) + " allocation, median of " + std::to_string(reps));
  figures.row("from " + scattered_chunks + "free chunks", format_seconds(free_chunks));
  figures.row("from " + scattered_chunks + "cached 1-chunk mappings", format_seconds(cached));
  figures.row("from an empty pool (extents created, UVMPOOL_EXTENT_SIZE)", format_seconds(empty), "<= 1.5 ms");
  figures.row("from an empty pool, extents off (chunks created)", format_seconds(recorder.seconds("empty_pool_chunks_only")));
  figures.row("from an empty pool, carved as the options say (the default)", format_seconds(recorder.seconds("empty_pool_carved")));
  figures.row("driver cuMemAlloc (baseline)", format_seconds(driver_alloc));
  figures.row("driver floor: cuMemMap per chunk + one cuMemSetAccess, chunks made beforehand", format_seconds(floor_s));
  if (free_chunks > 0 && floor_s > 0)
    figures.row("free chunks / driver floor", fixed(free_chunks / floor_s, 2) + "x", "<= 1.2x");
  if (free_chunks > 0 && driver_alloc > 0)
    figures.row("free chunks / cuMemAlloc", fixed(free_chunks / driver_alloc, 1) + "x");
  if (g_modeled_empty >= 0) {
    // The virtual clock's advance over each timed call: the driver calls priced by the UVMPOOL_SIM_*
    // costs (cuMemCreate 9.5 us, cuMemMap 0.85 us, cuMemSetAccess 23 us per mapping it covers, H200).
    figures.row("modeled: from scattered free chunks", format_seconds(g_modeled_free));
    figures.row("modeled: from scattered cached 1-chunk mappings", format_seconds(g_modeled_cached));
    figures.row("modeled: from an empty pool, extents", format_seconds(g_modeled_empty), "<= 1.5 ms");
    figures.row("modeled: from an empty pool, extents off", format_seconds(g_modeled_empty_chunks));
    figures.row("modeled: from an empty pool, carved (the default)", format_seconds(g_modeled_empty_carved));
    figures.row("modeled: driver floor (chunks made beforehand)", format_seconds(g_modeled_floor));
    if (g_modeled_floor > 0)
      figures.row("modeled: scattered free chunks / driver floor", fixed(g_modeled_free / g_modeled_floor, 2) + "x", "<= 1.2x");
  }
  figures.note("timed call, free chunks: " + counters_text(g_free));
  figures.note("timed call, cached mappings: " + counters_text(g_cached));
  if (device.simulated) figures.note("simulated driver: these times say nothing about a GPU");
  figures.print();
  // Two targets (pool v2): a cold allocation from free memory in extents at most 1.5 ms, and one from
  // scattered free chunks at most 1.2x the driver floor (the mapping calls alone).
  const bool extents_met = empty > 0 && empty <= kTargetSeconds;
  const bool scattered_met = free_chunks > 0 && floor_s > 0 && free_chunks <= kFloorRatio * floor_s;
  summary_line("stitch", format_size(g.bytes) + " from an empty pool (extents) " + format_seconds(empty) +
                             " (target <= 1.5 ms)" + (extents_met ? "" : " ABOVE TARGET") +
                             ", from scattered free chunks " + format_seconds(free_chunks) + " = " +
                             (floor_s > 0 && free_chunks > 0 ? fixed(free_chunks / floor_s, 2) : std::string("?")) +
                             "x the driver floor (target <= 1.2x)" + (scattered_met ? "" : " ABOVE TARGET") +
                             ", from cached 1-chunk mappings " + format_seconds(cached));
  Score sc;
  sc.row = "1b";
  sc.what = "cold " + format_size(g.bytes) + " allocation: from free memory in extents (created on the spot), and " +
            "stitched from " + scattered_chunks + "free " + format_size(g.chunk) + " chunks";
  sc.uvmpool = format_seconds(empty) + " from extents; " + format_seconds(free_chunks) + " from scattered chunks";
  sc.baseline = "driver floor " + format_seconds(floor_s) + " (the mapping calls alone, per 2 MiB chunk); cuMemAlloc " +
                format_seconds(driver_alloc) + " (no stitching: needs contiguous free memory)";
  if (free_chunks > 0 && floor_s > 0) sc.ratio = free_chunks / floor_s;
  sc.ratio_is = "uvmpool from scattered chunks / driver floor time";
  sc.target = "<= 1.5 ms from extents; <= 1.2x the driver floor from scattered chunks";
  sc.met = extents_met && scattered_met ? 1 : 0;
  sc.ceiling = "the driver's cuMemMap + cuMemSetAccess of every chunk (" + format_seconds(floor_s) +
               "); extents (UVMPOOL_EXTENT_SIZE) make 16x fewer mappings";
  score_line(sc);
  return 0;
}
