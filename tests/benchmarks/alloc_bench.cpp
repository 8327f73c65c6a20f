// uvmpool-bench-alloc: steady-state latency of one allocation + free pair, the pool
// (Pool::allocate / deallocate) against the driver (cuMemAlloc_v2 / cuMemFree_v2), per size; and the
// stream-ordered pair (allocate_async / deallocate_async against cuMemAllocAsync / cuMemFreeAsync on
// one stream). Target: the pool's synchronous pair at least 30x faster than the driver's at every
// size. "Steady state": one untimed pair first, so the pool serves from a slab slot or a cached
// mapping, as it does for a training loop after its first step.
#include <cstdio>
#include <string>

#include "bench_common.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr double kTargetSpeedup = 30;

pool::Pool* g_pool = nullptr;
CUstream g_stream = nullptr;

void pool_pair(benchmark::State& state, std::size_t bytes) {
  CUdeviceptr p = 0;
  CUresult result = CUDA_SUCCESS;
  if (g_pool->allocate(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("Pool::allocate failed");
  g_pool->deallocate(p, &result);
  for (auto _ : state) {
    if (g_pool->allocate(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("Pool::allocate failed");
    g_pool->deallocate(p, &result);
  }
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

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-alloc", "alloc+free pair latency, pool vs cuMemAlloc/cuMemFree");
  options.add("sizes", "256,4K,64K,1M,2M,64M,1G", "allocation sizes, comma-separated");
  options.add("min-time", "0.2", "seconds each benchmark runs at least");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);
  const auto sizes = options.sizes("sizes");
  const double min_time = options.real("min-time");

  const Device device = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-alloc", device);
  pool::Pool pool(drv(), pool::PoolConfig{});
  g_pool = &pool;
  check(drv().cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

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
  double worst = -1, worst_async = -1;
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
      if (low < 0 || speedup < low) low = speedup, (sync ? worst_size : worst_async_size) = format_size(bytes);
    }
  }
  // Counted over the whole run, first pairs included: about one mapping per large size is expected,
  // and nothing that grows with the iterations (the steady state makes no driver call).
  figures.note("pool during the run: " + std::to_string(after.stitched_maps - before.stitched_maps) +
               " mappings built, " + std::to_string(after.chunks_created - before.chunks_created) +
               " chunks created, " + std::to_string(after.cache_hits - before.cache_hits) + " cache hits");
  if (device.simulated) figures.note("simulated driver: these ratios say nothing about a GPU");
  figures.print();
  if (worst >= 0)
    summary_line("alloc", "worst speedup " + fixed(worst, 1) + "x at " + worst_size + " (target >= 30x)" +
                              (worst >= kTargetSpeedup ? "" : " BELOW TARGET") + "; async worst " +
                              fixed(worst_async, 1) + "x at " + worst_async_size);
  drv().cuStreamDestroy_v2(g_stream);
  return 0;
}
