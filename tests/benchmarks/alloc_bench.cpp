// uvmpool-bench-alloc: steady-state latency of one allocation + free pair, the pool
// (Pool::allocate / deallocate) against the driver (cuMemAlloc_v2 / cuMemFree_v2), per size; and the
// stream-ordered pair (allocate_async / deallocate_async against cuMemAllocAsync / cuMemFreeAsync on
// one stream). Target: the pool's synchronous pair at least 30x faster than the driver's at every
// size. "Steady state": one untimed pair first, so the pool serves from a slab slot or a cached
// mapping, as it does for a training loop after its first step.
//
// Then what observability costs on that same pair: a pool with the statistics-only counters off and
// nothing published ("bare") against the default (counters on, live statistics published by their
// thread every UVMPOOL_STATS_INTERVAL), and that against the same with UVMPOOL_TRACE recording.
// Targets: statistics at most 2%, tracing at most 10%.
//
// Last, what UVMPOOL_GUARD costs (--guard=only runs just that): a pool in guard mode builds and
// unmaps a mapping, and waits for the device, on every pair. On the simulated driver its figures are
// modeled (the virtual clock, the H200 call costs of docs/simulator.md), not measured.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/catalog_ptx.h"
#include "pool/pool.h"
#include "stats/collect.h"
#include "stats/publisher.h"
#include "trace/trace.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr double kTargetSpeedup = 30;

constexpr double kStatsBudget = 0.02;
constexpr double kTraceBudget = 0.10;

pool::Pool* g_pool = nullptr;
pool::Pool* g_bare = nullptr;  // PoolConfig::counters off, nothing published
CUstream g_stream = nullptr;
std::string g_trace_path;

void pair_on(benchmark::State& state, pool::Pool* pool, std::size_t bytes) {
  CUdeviceptr p = 0;
  CUresult result = CUDA_SUCCESS;
  if (pool->allocate(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("Pool::allocate failed");
  pool->deallocate(p, &result);
  for (auto _ : state) {
    if (pool->allocate(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("Pool::allocate failed");
    pool->deallocate(p, &result);
  }
}

void pool_pair(benchmark::State& state, std::size_t bytes) { pair_on(state, g_pool, bytes); }
void bare_pair(benchmark::State& state, std::size_t bytes) { pair_on(state, g_bare, bytes); }

std::size_t sample_bench_pool(uvmpool::trace::Sample* out, std::size_t max) {
  if (max == 0) return 0;
  const pool::DeviceStats s = g_pool->stats(0);
  out[0] = {0, s.live_bytes - s.live_host_bytes, s.live_host_bytes, s.held_bytes, s.host_held_bytes};
  return 1;
}

// The trace records only while this benchmark runs (it is process-wide): started before the timed
// loop, stopped after it, so the other benchmarks run untraced.
void traced_pair(benchmark::State& state, std::size_t bytes) {
  if (!uvmpool::trace::start(g_trace_path, 256ull << 20, sample_bench_pool)) return state.SkipWithError("trace::start failed");
  pair_on(state, g_pool, bytes);
  uvmpool::trace::stop();
  const auto status = uvmpool::trace::status();
  state.counters["events"] = static_cast<double>(status.events);
  state.counters["dropped"] = static_cast<double>(status.dropped);
  // Unlinked now, its dirty pages are dropped instead of written back while the next benchmark runs
  // (the pool without counters, first in each round, read 20-40% slower than the default pool on a
  // 2-core machine while the kernel wrote out the last traced run's 250 MiB).
  std::filesystem::remove(g_trace_path);
}

void native_pair(benchmark::State& state, std::size_t bytes) {
  const driver::Table& d = drv();
  CUdeviceptr p = 0;
  for (auto _ : state) {
    if (d.cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("cuMemAlloc failed");
    d.cuMemFree_v2(p);
  }
}

void pool_async_pair(benchmark::State& state, std::size_t bytes) {
  CUdeviceptr p = 0;
  CUresult result = CUDA_SUCCESS;
  if (g_pool->allocate_async(&p, bytes, g_stream) != CUDA_SUCCESS)
    return state.SkipWithError("Pool::allocate_async failed");
  g_pool->deallocate_async(p, g_stream, &result);
  for (auto _ : state) {
    if (g_pool->allocate_async(&p, bytes, g_stream) != CUDA_SUCCESS)
      return state.SkipWithError("Pool::allocate_async failed");
    g_pool->deallocate_async(p, g_stream, &result);
  }
}

void native_async_pair(benchmark::State& state, std::size_t bytes) {
  const driver::Table& d = drv();
  CUdeviceptr p = 0;
  // The device's default memory pool keeps freed memory until a synchronization, so after this
  // untimed pair the loop below is the driver's own steady state too.
  if (d.cuMemAllocAsync(&p, bytes, g_stream) != CUDA_SUCCESS) return state.SkipWithError("cuMemAllocAsync failed");
  d.cuMemFreeAsync(p, g_stream);
  for (auto _ : state) {
    if (d.cuMemAllocAsync(&p, bytes, g_stream) != CUDA_SUCCESS)
      return state.SkipWithError("cuMemAllocAsync failed");
    d.cuMemFreeAsync(p, g_stream);
  }
  d.cuStreamSynchronize(g_stream);
}

std::string key(const char* kind, std::uint64_t bytes) { return std::string(kind) + "/" + std::to_string(bytes); }
std::string round_key(const char* kind, std::uint64_t bytes, int round) {
  return key(kind, bytes) + "/round:" + std::to_string(round);
}

// --- UVMPOOL_GUARD's cost ---------------------------------------------------------------------

// Seconds per call of `step`, after one untimed call (the steady state): on the simulated driver the
// virtual clock's advance (modeled), on a GPU the wall clock.
double seconds_per(const Device& device, int count, const std::function<void()>& step) {
  step();
  const double modeled_start = modeled_now();
  const auto wall_start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) step();
  check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
  if (device.simulated) return (modeled_now() - modeled_start) / count;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count() / count;
}

void guard_costs(const Device& device, const std::vector<std::uint64_t>& sizes, int count) {
  pool::Pool normal(drv(), pool::PoolConfig{});
  pool::PoolConfig guard_config;
  guard_config.guard = true;
  pool::Pool guarded(drv(), guard_config);
  const driver::Table& d = drv();
  CUmodule module = nullptr;
  check(d.cuModuleLoadData(&module, device.simulated ? static_cast<const void*>("uvmpool-sim-module 1\n")
                                                     : static_cast<const void*>(kCatalogPtx)),
        "cuModuleLoadData");
  CUfunction fill = nullptr;
  check(d.cuModuleGetFunction(&fill, module, "uvmpool_fill_u32"), "cuModuleGetFunction");
  const auto pair = [](pool::Pool& pool, std::size_t bytes) {
    CUdeviceptr p = 0;
    CUresult r = CUDA_SUCCESS;
    check(pool.allocate(&p, bytes), "Pool::allocate");
    pool.deallocate(p, &r);
    check(r, "Pool::deallocate");
  };
  // A training step's pattern: allocate, a kernel writes the memory, free; the normal pool's free
  // does not wait for the kernel, guard mode's does (it unmaps).
  const auto step = [&](pool::Pool& pool, std::size_t bytes) {
    CUdeviceptr p = 0;
    CUresult r = CUDA_SUCCESS;
    check(pool.allocate(&p, bytes), "Pool::allocate");
    std::uint64_t words = bytes / 4;
    std::uint32_t value = 1;
    void* params[] = {&p, &words, &value};
    check(d.cuLaunchKernel(fill, 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    pool.deallocate(p, &r);
    check(r, "Pool::deallocate");
  };
  const std::string unit = device.simulated ? "modeled" : "measured";
  Figures figures(std::string("UVMPOOL_GUARD's cost (") + unit + (device.simulated ? " on the simulated clock)" : " on the GPU)"));
  double worst_step = -1;
  std::string worst_step_size;
  for (std::uint64_t bytes : sizes) {
    const double native = seconds_per(device, count, [&] {
      CUdeviceptr p = 0;
      check(d.cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
      check(d.cuMemFree_v2(p), "cuMemFree");
    });
    const double pool_pair = seconds_per(device, count, [&] { pair(normal, bytes); });
    const double guard_pair = seconds_per(device, count, [&] { pair(guarded, bytes); });
    figures.row("alloc+free pair " + format_size(bytes) + ": guard " + format_seconds(guard_pair) + ", pool " +
                    format_seconds(pool_pair) + ", cuMemAlloc+cuMemFree " + format_seconds(native),
                fixed(guard_pair / native, 2) + "x the driver's");
    const double normal_step = seconds_per(device, count, [&] { step(normal, bytes); });
    const double guard_step = seconds_per(device, count, [&] { step(guarded, bytes); });
    const double ratio = guard_step / normal_step;
    figures.row("step (alloc, kernel writing it, free) " + format_size(bytes) + ": normal " +
                    format_seconds(normal_step) + ", guard " + format_seconds(guard_step),
                fixed(ratio, 2) + "x");
    if (ratio > worst_step) worst_step = ratio, worst_step_size = format_size(bytes);
  }
  // Memory: every guarded allocation holds whole chunks of its own.
  constexpr int kLive = 100;
  const auto held_by = [&](pool::Pool& pool) {
    pool.release_idle();  // what the sizes above left cached or free
    std::vector<CUdeviceptr> live(kLive);
    for (CUdeviceptr& p : live) check(pool.allocate(&p, 256), "Pool::allocate");
    const std::uint64_t held = pool.stats(device.device).held_bytes + pool.stats(device.device).host_held_bytes;
    CUresult r = CUDA_SUCCESS;
    for (CUdeviceptr p : live) pool.deallocate(p, &r);
    return held;
  };
  const std::uint64_t normal_held = held_by(normal), guard_held = held_by(guarded);
  figures.row("memory held by " + std::to_string(kLive) + " live 256 B allocations: normal " + format_size(normal_held) +
                  ", guard " + format_size(guard_held),
              fixed(static_cast<double>(guard_held) / static_cast<double>(normal_held), 0) + "x");
  figures.note("the normal pool's steady pair makes no driver call (a slab slot or a cached mapping; its time is the "
               "closing cuCtxSynchronize spread over the count); guard mode maps (cuMemMap + cuMemSetAccess), waits "
               "for the context (cuCtxSynchronize) and unmaps on every pair");
  if (device.simulated)
    figures.note("modeled: the simulator's cost model (H200 call costs and bandwidths), not a measurement; only a "
                 "GPU gives real times");
  figures.print();
  summary_line("guard", unit + ": step with a kernel worst " + fixed(worst_step, 2) + "x the normal pool's (at " +
                            worst_step_size + "); " + std::to_string(kLive) + " live 256 B allocations hold " +
                            format_size(guard_held) + " against " + format_size(normal_held) + "; for debugging only");
  d.cuModuleUnload(module);
}

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-alloc", "alloc+free pair latency, pool vs cuMemAlloc/cuMemFree");
  options.add("sizes", "256,4K,64K,1M,2M,64M,1G", "allocation sizes, comma-separated");
  options.add("min-time", "0.2", "seconds each benchmark runs at least");
  options.add("device", "0", "device ordinal");
  options.add("overhead-sizes", "256,64K,2M,64M", "sizes at which observability's cost is measured");
  options.add("repetitions", "15", "rounds of the observability benchmarks (the median round's ratios count)");
  options.add("round-time", "0.05", "seconds each variant runs at least in one round of the observability benchmarks");
  options.add("stats-interval", "250", "milliseconds between two updates of the published statistics");
  options.add("trace-file", "", "where the traced runs write (default: a file in the temporary directory, removed after)");
  options.add("guard", "on", "UVMPOOL_GUARD's cost, after the rest: on, off, or only (nothing else)");
  options.add("guard-sizes", "256,64K,2M,64M", "sizes at which guard mode's cost is measured");
  options.add("guard-count", "50", "pairs (and steps) timed per size and mode for guard mode's cost");
  options.add("carve-max-mib", "4096", "UVMPOOL_CARVE_MAX of the pools measured, in MiB (4096: its default; 0: carving off)");
  options.parse(&argc, argv);
  const auto sizes = options.sizes("sizes");
  const double min_time = options.real("min-time");

  const Device device = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-alloc", device);
  const std::string guard = options.text("guard");
  if (guard != "on" && guard != "off" && guard != "only") {
    std::fprintf(stderr, "uvmpool-bench-alloc: --guard must be on, off or only, not '%s'\n", guard.c_str());
    return 2;
  }
  if (guard == "only") {
    guard_costs(device, options.sizes("guard-sizes"), static_cast<int>(options.integer("guard-count")));
    return 0;
  }
  pool::PoolConfig config;
  config.carve_max = static_cast<std::size_t>(options.integer("carve-max-mib")) << 20;
  pool::Pool pool(drv(), config);
  g_pool = &pool;
  pool::PoolConfig bare_config = config;
  bare_config.counters = false;
  pool::Pool bare(drv(), bare_config);
  g_bare = &bare;
  const auto overhead_sizes = options.sizes("overhead-sizes");
  const int repetitions = static_cast<int>(options.integer("repetitions"));
  g_trace_path = options.text("trace-file");
  if (g_trace_path.empty()) {
    g_trace_path = (std::filesystem::temp_directory_path() / ("uvmpool-bench-alloc-" + std::to_string(getpid()) + ".json")).string();
  }
  // The default pool publishes its figures as a process using uvmpool would.
  auto publisher = stats::Publisher::start([&pool] { return stats::collect(&pool); },
                                           static_cast<std::uint32_t>(options.integer("stats-interval")));
  check(drv().cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // What observability costs, first: the default pool and the bare one then have the same history
  // (both fresh), so the pair compares counters and publishing, not two pools' layouts (run after the
  // speed pairs, the default pool's carved range had taken every size up to 1 GiB, and a 64 MiB pair
  // cost it 15% more with or without counters).
  // A few percent is the figure, and a machine's speed drifts by more than that over the seconds the
  // runs take (on an H200 host the statistics' cost read -23% to +35% from one suite to the next when
  // each variant's repetitions ran back to back). So the variants run in rounds, bare, statistics and
  // traced one after the other at each size, and each round gives its own ratios; the median round
  // decides, so drift between rounds cancels and one noisy round does not decide it. Rounds are short
  // and many (15 of 50 ms a variant): an H200 host's pair time moved between about 250 and 500 ns from
  // one 200 ms run to the next, so with 5 rounds of 200 ms the three variants of one round often ran
  // in different states, and the trace's figure read +9.6%, +29.4% and +51.6% in three runs of one
  // build on 2026-12-03. Odd rounds run the variants in the reverse order (traced, statistics, bare),
  // so a drift within a round (the first variant after another size's, the machine's clock moving)
  // falls on the bare pool as often as on the counted one, and cancels in the median.
  const double round_time = options.real("round-time");
  using Fn = void (*)(benchmark::State&, std::size_t);
  const std::pair<const char*, Fn> variants[] = {{"bare", bare_pair}, {"stats", pool_pair}, {"traced", traced_pair}};
  for (int round = 0; round < repetitions; ++round) {
    for (std::uint64_t bytes : overhead_sizes) {
      for (std::size_t i = 0; i < std::size(variants); ++i) {
        const auto& [kind, fn] = variants[round % 2 == 0 ? i : std::size(variants) - 1 - i];
        benchmark::RegisterBenchmark(round_key(kind, bytes, round).c_str(), fn, bytes)->MinTime(round_time);
      }
    }
  }
  // Names are "<kind>/<bytes>"; native and pool alternate per size so drift hits both alike.
  for (std::uint64_t bytes : sizes) {
    benchmark::RegisterBenchmark(key("native", bytes).c_str(), native_pair, bytes)->MinTime(min_time);
    benchmark::RegisterBenchmark(key("pool", bytes).c_str(), pool_pair, bytes)->MinTime(min_time);
  }
  for (std::uint64_t bytes : sizes) {
    benchmark::RegisterBenchmark(key("native_async", bytes).c_str(), native_async_pair, bytes)->MinTime(min_time);
    benchmark::RegisterBenchmark(key("pool_async", bytes).c_str(), pool_async_pair, bytes)->MinTime(min_time);
  }
  const pool::DeviceStats before = pool.stats(device.device);
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  const pool::DeviceStats after = pool.stats(device.device);

  Figures figures("alloc+free pair latency (native / pool = speedup)");
  double worst = -1, worst_async = -1, worst_native = -1, worst_pool = -1;
  std::string worst_size, worst_async_size;
  for (const bool sync : {true, false}) {
    for (std::uint64_t bytes : sizes) {
      const double native = recorder.seconds(key(sync ? "native" : "native_async", bytes));
      const double ours = recorder.seconds(key(sync ? "pool" : "pool_async", bytes));
      const std::string what = std::string(sync ? "pair " : "async pair ") + format_size(bytes);
      const std::string target = sync ? ">= 30x" : "";
      if (native < 0 || ours <= 0) {
        figures.row(what, "not run", target);
        continue;
      }
      const double speedup = native / ours;
      figures.row(what + " (native " + format_seconds(native) + ", pool " + format_seconds(ours) + ")",
                  fixed(speedup, 1) + "x", target);
      double& low = sync ? worst : worst_async;
      if (low < 0 || speedup < low) {
        low = speedup;
        (sync ? worst_size : worst_async_size) = format_size(bytes);
        if (sync) worst_native = native, worst_pool = ours;
      }
    }
  }
  // Counted over the whole run, first pairs included: about one mapping per large size is expected,
  // and nothing that grows with the iterations (the steady state makes no driver call).
  figures.note("pool during the run: " + std::to_string(after.stitched_maps - before.stitched_maps) +
               " mappings built, " + std::to_string(after.chunks_created - before.chunks_created) +
               " chunks created, " + std::to_string(after.cache_hits - before.cache_hits) + " cache hits");
  if (device.simulated) figures.note("simulated driver: these ratios say nothing about a GPU");
  figures.print();

  // What observability costs on the same pair: counters + live statistics against none, and the
  // trace against that.
  Figures costs("observability on the pool's alloc+free pair (extra time per pair)");
  double worst_stats = -1, worst_trace = -1;
  for (std::uint64_t bytes : overhead_sizes) {
    std::vector<double> bare_t, stats_t, traced_t, stats_ratio, trace_ratio;
    for (int round = 0; round < repetitions; ++round) {
      const double b = recorder.seconds(round_key("bare", bytes, round));
      const double st = recorder.seconds(round_key("stats", bytes, round));
      const double tr = recorder.seconds(round_key("traced", bytes, round));
      if (b <= 0 || st <= 0 || tr <= 0) continue;  // a round that failed gives no ratio
      bare_t.push_back(b), stats_t.push_back(st), traced_t.push_back(tr);
      stats_ratio.push_back(st / b), trace_ratio.push_back(tr / st);
    }
    if (stats_ratio.empty()) {
      costs.row("pair " + format_size(bytes), "not run");
      continue;
    }
    const double bare_s = median(bare_t), stats_s = median(stats_t), traced_s = median(traced_t);
    const double stats_cost = median(stats_ratio) - 1, trace_cost = median(trace_ratio) - 1;
    costs.row("statistics, " + format_size(bytes) + " (bare " + format_seconds(bare_s) + ", with " + format_seconds(stats_s) + ")",
              percent_change(stats_cost), "<= 2%");
    costs.row("trace, " + format_size(bytes) + " (" + format_seconds(traced_s) + ")", percent_change(trace_cost), "<= 10%");
    worst_stats = std::max(worst_stats, stats_cost);
    worst_trace = std::max(worst_trace, trace_cost);
  }
  const auto trace_status = uvmpool::trace::status();
  costs.note("trace of the last traced run: " + std::to_string(trace_status.events) + " events written, " +
             std::to_string(trace_status.dropped) + " dropped (a full ring or the file's bound), " +
             std::to_string(trace_status.bytes >> 20) + " MiB");
  costs.note("statistics published every " + options.text("stats-interval") + " ms by their thread during the whole run");
  costs.note("each figure: the median over " + std::to_string(repetitions) +
             " rounds of that round's ratio (bare, statistics and traced run one after the other in each round, "
             "in the reverse order in odd rounds); the times shown are the medians of each variant's");
  costs.print();
  if (publisher) publisher->stop();
  std::filesystem::remove(g_trace_path);
  if (worst_stats > -1)
    summary_line("observability", "statistics worst " + percent_change(worst_stats) + " (target <= 2%)" +
                                      (worst_stats <= kStatsBudget ? "" : " ABOVE TARGET") + ", trace worst " +
                                      percent_change(worst_trace) + " (target <= 10%)" +
                                      (worst_trace <= kTraceBudget ? "" : " ABOVE TARGET"));
  if (worst >= 0)
    summary_line("alloc", "worst speedup " + fixed(worst, 1) + "x at " + worst_size + " (target >= 30x)" +
                              (worst >= kTargetSpeedup ? "" : " BELOW TARGET") + "; async worst " +
                              fixed(worst_async, 1) + "x at " + worst_async_size);
  if (worst >= 0) {
    Score sc;
    sc.row = "1a";
    sc.what = "allocation latency: alloc+free pair, worst size of " + options.text("sizes");
    sc.uvmpool = format_seconds(worst_pool) + " per pair at " + worst_size;
    sc.baseline = "cuMemAlloc + cuMemFree " + format_seconds(worst_native);
    sc.ratio = worst;
    sc.ratio_is = "driver / uvmpool pair time";
    sc.target = ">= 30";
    sc.met = worst >= kTargetSpeedup ? 1 : 0;
    sc.ceiling = "a cached pair is a lock and a list: about 100 ns; the driver's pair is a call into the kernel driver";
    score_line(sc);
  }
  drv().cuStreamDestroy_v2(g_stream);
  if (guard == "on") guard_costs(device, options.sizes("guard-sizes"), static_cast<int>(options.integer("guard-count")));
  return 0;
}
