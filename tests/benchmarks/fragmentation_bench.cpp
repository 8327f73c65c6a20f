// uvmpool-bench-fragmentation: replays one allocation trace shaped like transformer training with
// a varying sequence length (trace.cpp) through the pool and through a first-fit caching allocator
// of the cudaMalloc kind (caching_allocator.h), one after the other in the same process, and reports
// peak reserved / peak live bytes for each. For the pool, reserved is the most chunks it ever held
// times the chunk size (DeviceStats::peak_held_bytes). Target for the pool: at most 1.05.
// Sizes, not times, are the point: the ratios mean the same on the simulated driver as on a GPU.
// Google Benchmark times each replay (one iteration each); the ratios come from the counters.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_common.h"
#include "caching_allocator.h"
#include "carved_replay.h"
#include "expandable_segments.h"
#include "driver/real_driver.h"
#include "pool/pool.h"
#include "timed_driver.h"
#include "trace.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr double kTargetRatio = 1.05;

struct Replay {
  bool ran = false;
  bool ok = true;
  std::string failure;
  double seconds = 0;
  double modeled = -1;  // on the simulated clock: the driver calls' modeled costs; negative on a GPU
};

// Runs the trace's events through allocate/deallocate; leftovers (weights, optimizer state) are
// freed afterwards, untimed.
template <typename Allocate, typename Deallocate>
Replay replay(const Trace& trace, Allocate&& allocate, Deallocate&& deallocate) {
  Replay r;
  r.ran = true;
  std::vector<CUdeviceptr> ptrs(trace.allocations, 0);
  const auto start = std::chrono::steady_clock::now();
  const double modeled_start = modeled_now();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (!e.alloc) {
      deallocate(ptrs[e.id]);
      ptrs[e.id] = 0;
    } else if (CUresult status = allocate(&ptrs[e.id], e.bytes); status != CUDA_SUCCESS) {
      r.ok = false;
      r.failure = "allocation of " + format_size(e.bytes) + " failed (error " + std::to_string(status) +
                  ") at event " + std::to_string(i);
      break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (modeled_start >= 0) r.modeled = modeled_now() - modeled_start;
  for (CUdeviceptr p : ptrs)
    if (p != 0) deallocate(p);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-fragmentation",
                  "peak reserved / peak live over a transformer-training trace, pool vs a caching allocator");
  options.add("scale", "1", "multiplies layers and batch (1: 3.8 GiB live at peak; 4: 28 GiB, for a GPU)");
  options.add("layers", "0", "decoder layers (0: 8 * scale)");
  options.add("batch", "0", "sequences per step (0: 8 * scale)");
  options.add("hidden", "1024", "model width");
  options.add("heads", "16", "attention heads");
  options.add("vocab", "32000", "vocabulary size");
  options.add("seq-min", "64", "shortest sequence length");
  options.add("seq-max", "512", "longest sequence length");
  options.add("steps", "30", "training steps");
  options.add("seed", "1", "seed of the sequence lengths");
  options.add("device", "0", "device ordinal");
  options.add("extent-mib", "32", "the pool's extent size in MiB (UVMPOOL_EXTENT_SIZE; 0: chunks only)");
  options.add("carve-max-mib", "4096", "the pool's UVMPOOL_CARVE_MAX in MiB (its default: 4096; 0: carving off)");
  options.add("time-calls", "0", "1: the caching allocator's and the pool's replays call the driver through a table that times each call on the host (wall clock), and each replay's calls are printed by time: what a GPU's replay time is made of");
  options.add("carve-group", "4", "the pool's UVMPOOL_CARVE_GROUP: slots a carved group holds at most (its default: 4; 1: no groups)");
  options.add("stitched", "1", "1: also replay the pool with carving off (UVMPOOL_CARVE_MAX=0), stitched only");
  options.add("carve-extent-mib", "64", "extent size in MiB of the carved-range replay (the pool's carving component alone)");
  options.add("dump-trace", "", "write the trace to this file, one event a line ('a ID BYTES' or 'f ID'), and exit "
                                "(input of scripts/carving-model.py)");
  options.parse(&argc, argv);
  // The simulated driver's devices have 8 GiB by default; give the caching allocator room to show
  // its overhead. Only the simulator reads this (its memory is never touched, so it costs nothing).
  setenv("UVMPOOL_SIM_DEVICE_MEMORY", "64G", 0);

  const int scale = static_cast<int>(options.integer("scale"));
  ModelShape shape;
  shape.layers = options.integer("layers") > 0 ? static_cast<int>(options.integer("layers")) : 8 * scale;
  shape.batch = options.integer("batch") > 0 ? static_cast<int>(options.integer("batch")) : 8 * scale;
  shape.hidden = static_cast<int>(options.integer("hidden"));
  shape.heads = static_cast<int>(options.integer("heads"));
  shape.vocab = static_cast<int>(options.integer("vocab"));
  shape.seq_min = static_cast<int>(options.integer("seq-min"));
  shape.seq_max = static_cast<int>(options.integer("seq-max"));
  shape.steps = static_cast<int>(options.integer("steps"));
  shape.seed = static_cast<std::uint64_t>(options.integer("seed"));
  const Trace trace = transformer_trace(shape);
  if (const std::string& path = options.text("dump-trace"); !path.empty()) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::perror(path.c_str());
      return 2;
    }
    for (const TraceEvent& e : trace.events) {
      if (e.alloc)
        std::fprintf(f, "a %u %llu\n", e.id, static_cast<unsigned long long>(e.bytes));
      else
        std::fprintf(f, "f %u\n", e.id);
    }
    const bool ok = std::fclose(f) == 0;
    std::printf("%zu events written to %s\n", trace.events.size(), path.c_str());
    return ok ? 0 : 1;
  }

  const Device device = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-fragmentation", device);
  std::printf("trace: %d layers, hidden %d, batch %d, sequence %d..%d, %d steps, seed %llu: %zu events, "
              "%u allocations, %s allocated in all, peak live %s\n",
              shape.layers, shape.hidden, shape.batch, shape.seq_min, shape.seq_max, shape.steps,
              static_cast<unsigned long long>(shape.seed), trace.events.size(), trace.allocations,
              format_size(trace.allocated).c_str(), format_size(trace.peak_live).c_str());
  std::fflush(stdout);

  // Each replay is one Google Benchmark iteration timed by the replay itself; the caching allocator
  // goes first and gives its segments back to the driver before the pool starts.
  // --time-calls: both replays through the timing table, each one's calls kept for the notes.
  const bool time_calls = options.integer("time-calls") != 0;
  const driver::Table& table = time_calls ? timed_driver(drv()) : drv();
  std::string cache_timed, pool_timed;
  std::uint64_t cache_timed_ns = 0, pool_timed_ns = 0;
  std::uint64_t cache_peak = 0, cache_segments = 0, cache_oom = 0;
  Replay cached, pooled;
  pool::DeviceStats stats;
  benchmark::RegisterBenchmark("replay/caching_allocator", [&](benchmark::State& state) {
    for (auto _ : state) {
      CachingAllocator allocator(table);
      reset_timed_calls();
      cached = replay(
          trace, [&](CUdeviceptr* p, std::size_t n) { return allocator.allocate(p, n); },
          [&](CUdeviceptr p) { allocator.deallocate(p); });
      cache_timed = describe_timed_calls(8, &cache_timed_ns);
      cache_peak = allocator.peak_reserved();
      cache_segments = allocator.segments();
      cache_oom = allocator.retries_after_oom();
      state.SetIterationTime(cached.seconds);
      if (!cached.ok) state.SkipWithError(cached.failure.c_str());
    }
  })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  // The peer closest to the pool, PyTorch's expandable segments (expandable_segments.h): how far the
  // pool's churn is from a VMM allocator that carves allocations out of pages mapped once.
  std::uint64_t segments_peak = 0, segments_pages = 0;
  Replay segmented;
  benchmark::RegisterBenchmark("replay/expandable_segments", [&](benchmark::State& state) {
    for (auto _ : state) {
      ExpandableSegments allocator(drv(), device.device, device.total_memory);
      segmented = replay(
          trace, [&](CUdeviceptr* p, std::size_t n) { return allocator.allocate(p, n); },
          [&](CUdeviceptr p) { allocator.deallocate(p); });
      segments_peak = allocator.peak_reserved();
      segments_pages = allocator.pages();
      state.SetIterationTime(segmented.seconds);
      if (!segmented.ok) state.SkipWithError(segmented.failure.c_str());
    }
  })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  // The pool's carving component alone (carved_replay.h): what carving costs and holds on this trace
  // before the device pool routes allocations through it.
  const std::size_t carve_extent = static_cast<std::size_t>(options.integer("carve-extent-mib")) << 20;
  std::uint64_t carved_peak = 0;
  pool::CarvedRange::Figures carved_figures;
  std::uint64_t carved_made = 0;
  Replay carved;
  benchmark::RegisterBenchmark("replay/carved_range", [&](benchmark::State& state) {
    for (auto _ : state) {
      CarvedReplay allocator(drv(), device.device, 2 * device.total_memory, carve_extent);
      carved = replay(
          trace, [&](CUdeviceptr* p, std::size_t n) { return allocator.allocate(p, n); },
          [&](CUdeviceptr p) { allocator.deallocate(p); });
      carved_peak = allocator.peak_reserved();
      carved_figures = allocator.figures();
      carved_made = allocator.extents_made();
      state.SetIterationTime(carved.seconds);
      if (!carved.ok) state.SkipWithError(carved.failure.c_str());
    }
  })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  // On the simulator, the pool's driver calls during its replay and the modeled time each took: what
  // its modeled time is made of (each call's cost: the UVMPOOL_SIM_* constants; cuMemSetAccess costs
  // per mapping it covers).
  using ResetCounts = void (*)();
  using CallCount = unsigned long long (*)(const char*);
  const auto reset_counts = reinterpret_cast<ResetCounts>(driver::real_symbol("uvmpool_sim_reset_counts"));
  const auto call_count = reinterpret_cast<CallCount>(driver::real_symbol("uvmpool_sim_call_count"));
  const auto call_ns = reinterpret_cast<CallCount>(driver::real_symbol("uvmpool_sim_call_ns"));
  static constexpr const char* kVmmCalls[] = {"cuMemCreate",         "cuMemMap",        "cuMemSetAccess",
                                              "cuMemUnmap",          "cuMemRelease",    "cuMemGetInfo",
                                              "cuMemAddressReserve", "cuMemAddressFree"};
  const auto calls_made = [&] {
    std::string calls;
    for (const char* fn : kVmmCalls) {
      if (call_count == nullptr || call_ns == nullptr) break;
      calls += std::string(calls.empty() ? "" : ", ") + fn + " " + std::to_string(call_count(fn)) + " (" +
               fixed(static_cast<double>(call_ns(fn)) / 1e6, 2) + " ms)";
    }
    return calls;
  };
  std::string pool_calls;
  const std::size_t carve_max = static_cast<std::size_t>(options.integer("carve-max-mib")) << 20;
  benchmark::RegisterBenchmark("replay/pool", [&](benchmark::State& state) {
    for (auto _ : state) {
      pool::PoolConfig config;
      config.extent_size = static_cast<std::size_t>(options.integer("extent-mib")) << 20;
      config.carve_max = carve_max;
      config.carve_group = static_cast<std::size_t>(options.integer("carve-group"));
      pool::Pool pool(table, config);
      CUresult ignored = CUDA_SUCCESS;
      if (reset_counts != nullptr) reset_counts();
      reset_timed_calls();
      pooled = replay(
          trace, [&](CUdeviceptr* p, std::size_t n) { return pool.allocate(p, n); },
          [&](CUdeviceptr p) { pool.deallocate(p, &ignored); });
      pool_timed = describe_timed_calls(10, &pool_timed_ns);
      stats = pool.stats(device.device);
      pool_calls = calls_made();
      state.SetIterationTime(pooled.seconds);
      if (!pooled.ok) state.SkipWithError(pooled.failure.c_str());
    }
  })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  // The pool again with carving off (UVMPOOL_CARVE_MAX=0): every allocation stitched from pieces of its
  // own, what carving saves (docs/architecture.md, "Carving").
  Replay pool_stitched;
  pool::DeviceStats stitched_stats;
  std::string stitched_calls;
  if (options.integer("stitched") != 0) {
    benchmark::RegisterBenchmark("replay/pool_stitched", [&](benchmark::State& state) {
      for (auto _ : state) {
        pool::PoolConfig config;
        config.extent_size = static_cast<std::size_t>(options.integer("extent-mib")) << 20;
        config.carve_max = 0;
        pool::Pool pool(drv(), config);
        CUresult ignored = CUDA_SUCCESS;
        if (reset_counts != nullptr) reset_counts();
        pool_stitched = replay(
            trace, [&](CUdeviceptr* p, std::size_t n) { return pool.allocate(p, n); },
            [&](CUdeviceptr p) { pool.deallocate(p, &ignored); });
        stitched_stats = pool.stats(device.device);
        stitched_calls = calls_made();
        state.SetIterationTime(pool_stitched.seconds);
        if (!pool_stitched.ok) state.SkipWithError(pool_stitched.failure.c_str());
      }
    })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  }
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  if (!cached.ran || !pooled.ran) {
    std::printf("both replays must run (check --benchmark_filter)\n");
    return 2;
  }

  const double live = static_cast<double>(trace.peak_live);
  const double pool_ratio = static_cast<double>(stats.peak_held_bytes) / live;
  const double cache_ratio = static_cast<double>(cache_peak) / live;
  Figures figures("peak reserved / peak live (" + format_size(trace.peak_live) + " live at peak)");
  if (pooled.ok)
    figures.row("pool (" + format_size(stats.peak_held_bytes) + " held at peak)", fixed(pool_ratio, 3), "<= 1.05");
  else
    figures.row("pool: " + pooled.failure, "failed", "<= 1.05");
  if (cached.ok)
    figures.row("caching allocator (" + format_size(cache_peak) + " in " + std::to_string(cache_segments) +
                    " segments)", fixed(cache_ratio, 3));
  else
    figures.row("caching allocator: " + cached.failure, "failed");
  if (segmented.ok && segmented.ran)
    figures.row("expandable segments (" + format_size(segments_peak) + " in " + std::to_string(segments_pages) +
                    " pages)", fixed(static_cast<double>(segments_peak) / live, 3));
  else if (segmented.ran)
    figures.row("expandable segments: " + segmented.failure, "failed");
  if (pool_stitched.ok && pool_stitched.ran)
    figures.row("pool stitched only, UVMPOOL_CARVE_MAX=0 (" + format_size(stitched_stats.peak_held_bytes) +
                    " held at peak)",
                fixed(static_cast<double>(stitched_stats.peak_held_bytes) / live, 3));
  else if (pool_stitched.ran)
    figures.row("pool stitched only: " + pool_stitched.failure, "failed");
  if (carved.ok && carved.ran)
    figures.row("carved range alone, 512 B units (" + format_size(carved_peak) + " in " + format_size(carve_extent) + " extents, " +
                    std::to_string(carved_made) + " made, " + std::to_string(carved_figures.remapped) + " moved)",
                fixed(static_cast<double>(carved_peak) / live, 3));
  else if (carved.ran)
    figures.row("carved range alone: " + carved.failure, "failed");
  figures.row("replay time, pool", format_seconds(pooled.seconds));
  figures.row("replay time, caching allocator", format_seconds(cached.seconds));
  if (segmented.ok && segmented.ran) {
    figures.row("replay time, expandable segments", format_seconds(segmented.seconds));
    if (!device.simulated && pooled.ok)
      figures.row("replay time, pool / expandable segments", fixed(pooled.seconds / segmented.seconds, 2));
  }
  // The churn figure pool v2 is held to: on the simulator, the same replays with every driver call at
  // its modeled cost (the UVMPOOL_SIM_* constants, H200 measurements; docs/simulator.md).
  const bool modeled = pooled.ok && cached.ok && pooled.modeled >= 0 && cached.modeled > 0;
  if (modeled) {
    figures.row("modeled replay time, pool (simulated clock)", format_seconds(pooled.modeled));
    figures.row("modeled replay time, caching allocator (simulated clock)", format_seconds(cached.modeled));
    figures.row("modeled replay time, pool / caching allocator", fixed(pooled.modeled / cached.modeled, 2),
                "<= 1.2");
    if (segmented.ok && segmented.ran && segmented.modeled > 0) {
      figures.row("modeled replay time, expandable segments (simulated clock)", format_seconds(segmented.modeled));
      figures.row("modeled replay time, pool / expandable segments", fixed(pooled.modeled / segmented.modeled, 2));
    }
    if (pool_stitched.ok && pool_stitched.ran && pool_stitched.modeled > 0) {
      figures.row("modeled replay time, pool stitched only (simulated clock)", format_seconds(pool_stitched.modeled));
      figures.row("modeled replay time, pool stitched only / caching allocator",
                  fixed(pool_stitched.modeled / cached.modeled, 2));
    }
    if (carved.ok && carved.ran && carved.modeled > 0) {
      figures.row("modeled replay time, carved range alone (simulated clock)", format_seconds(carved.modeled));
      figures.row("modeled replay time, carved range alone / caching allocator", fixed(carved.modeled / cached.modeled, 2));
    }
  }
  figures.note("pool: " + std::to_string(stats.chunks_created) + " chunks created, " +
               std::to_string(stats.stitched_maps) + " mappings built, " + std::to_string(stats.cache_hits) +
               " cache hits (" + std::to_string(stats.mappings_carved) + " of them cut or joined), " +
               std::to_string(stats.mappings_broken) + " mappings broken, peak live by its count " +
               format_size(stats.peak_live_bytes));
  if (!pool_calls.empty())
    figures.note("pool's driver calls in its replay (simulated driver; modeled time): " + pool_calls);
  if (time_calls) {
    // Host wall time inside the driver, against each replay's time: the rest is the allocator's own.
    const auto timed = [&](const char* who, const Replay& r, std::uint64_t ns, const std::string& calls) {
      figures.note(std::string(who) + ": " + fixed(static_cast<double>(ns) / 1e6, 2) + " ms of its " +
                   fixed(r.seconds * 1e3, 2) + " ms in driver calls (host wall time, measured" +
                   (device.simulated ? " on the simulated driver" : "") + "): " + calls);
    };
    timed("caching allocator", cached, cache_timed_ns, cache_timed);
    timed("pool", pooled, pool_timed_ns, pool_timed);
  }
  if (!stitched_calls.empty())
    figures.note("stitched only: " + std::to_string(stitched_stats.stitched_maps) + " mappings built, " +
                 std::to_string(stitched_stats.chunks_created) + " chunks created; driver calls " + stitched_calls);
  if (cache_oom > 0)
    figures.note("caching allocator hit out-of-memory " + std::to_string(cache_oom) +
                 " times and emptied its cache: its peak is capped by the device");
  if (device.simulated)
    figures.note("simulated driver: the size ratios hold on a GPU; the wall times do not; the modeled times are "
                 "the simulator's cost model (docs/simulator.md), to be checked against a GPU");
  figures.print();
  if (pooled.ok && cached.ok && (!device.simulated || modeled)) {
    // Scoreboard row 1c, the churn figure: on a GPU the replays' wall times (measured), on the
    // simulator their modeled times (the wall time of host memory calls means nothing there).
    const double pool_s = device.simulated ? pooled.modeled : pooled.seconds;
    const double cache_s = device.simulated ? cached.modeled : cached.seconds;
    const char* kind = device.simulated ? "modeled (simulated clock)" : "measured";
    Score sc;
    sc.row = "1c";
    sc.what = "churn: a varying-shape transformer training trace (" + format_size(trace.peak_live) +
              " live at peak, " + std::to_string(trace.allocations) + " allocations) replayed, time " + kind;
    sc.uvmpool = format_seconds(pool_s) + " (" + std::to_string(stats.stitched_maps) + " mappings built, " +
                 std::to_string(stats.mappings_broken) + " broken, " + std::to_string(stats.chunks_created) +
                 " chunks created)";
    sc.baseline = "caching allocator " + format_seconds(cache_s) + " (" + std::to_string(cache_segments) +
                  " cuMemAlloc segments)";
    if (cache_s > 0) sc.ratio = pool_s / cache_s;
    sc.ratio_is = "pool / caching allocator replay time";
    sc.target = "<= 1.2";
    sc.met = cache_s > 0 && pool_s / cache_s <= 1.2 ? 1 : 0;
    sc.ceiling = "the caching allocator's own time: it makes a driver call only for a new segment";
    score_line(sc);
  }
  summary_line("fragmentation", pooled.ok && cached.ok
                                    ? "pool " + fixed(pool_ratio, 3) + " (target <= 1.05)" +
                                          (pool_ratio <= kTargetRatio ? "" : " ABOVE TARGET") +
                                          ", caching allocator " + fixed(cache_ratio, 3) + ", peak live " +
                                          format_size(trace.peak_live) +
                                          (modeled ? ", modeled time pool / caching allocator " +
                                                         fixed(pooled.modeled / cached.modeled, 2) + " (target <= 1.2)"
                                                   : std::string())
                                    : "FAILED: " + (pooled.ok ? cached.failure : pooled.failure));
  return pooled.ok && cached.ok ? 0 : 1;
}
