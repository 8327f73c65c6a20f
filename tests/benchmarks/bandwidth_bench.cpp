// uvmpool-bench-bandwidth: kernel read and write bandwidth over a pool allocation (a stitched VMM
// range) against a cuMemAlloc allocation of the same size, timed with CUDA events. Target: pool /
// native at least 0.99 for both. Kernels: kernels/bandwidth.cu, loaded from committed PTX with
// cuModuleLoadData (reached by name: the driver table lists only what uvmpool hooks or calls).
// The simulated driver runs no kernels: there this prints that it needs a GPU and exits 0.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "driver/real_driver.h"
#include "kernels/bandwidth_ptx.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr double kTargetRatio = 0.99;

using ModuleLoadData = CUresult (*)(CUmodule*, const void*);
using ModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, CUstream, void**, void**);
using ElapsedTime = CUresult (*)(float*, CUevent, CUevent);

struct Gpu {
  LaunchKernel launch = nullptr;
  ElapsedTime elapsed = nullptr;  // cuEventElapsedTime_v2, or v1 on drivers before 12.8
  CUfunction read = nullptr, write = nullptr;
  unsigned grid = 0, block = 256;
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  CUdeviceptr sink = 0;
  std::size_t bytes = 0;
};
Gpu g;
std::map<std::string, std::vector<double>> g_seconds;  // per benchmark, each launch

CUresult launch(bool read, CUdeviceptr data) {
  std::size_t words = g.bytes / 16;
  unsigned value = 0x5a5a5a5au;
  void* read_args[] = {&data, &words, &g.sink};
  void* write_args[] = {&data, &words, &value};
  return g.launch(read ? g.read : g.write, g.grid, 1, 1, g.block, 1, 1, 0, g.stream,
                  read ? read_args : write_args, nullptr);
}

void kernel_bench(benchmark::State& state, bool read, CUdeviceptr data, const std::string& name) {
  const driver::Table& d = drv();
  std::vector<double>& seconds = g_seconds[name];
  if (launch(read, data) != CUDA_SUCCESS) return state.SkipWithError("cuLaunchKernel failed");  // warm-up
  d.cuStreamSynchronize(g.stream);
  for (auto _ : state) {
    d.cuEventRecord(g.start, g.stream);
    if (launch(read, data) != CUDA_SUCCESS) return state.SkipWithError("cuLaunchKernel failed");
    d.cuEventRecord(g.stop, g.stream);
    check(d.cuEventSynchronize(g.stop), "cuEventSynchronize");
    float ms = 0;
    check(g.elapsed(&ms, g.start, g.stop), "cuEventElapsedTime");
    seconds.push_back(ms / 1e3);
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * g.bytes));
}

// The write kernel's pattern at both ends of `data`: a wrong mapping would show here.
bool pattern_ok(CUdeviceptr data) {
  check(launch(false, data), "cuLaunchKernel");
  check(drv().cuStreamSynchronize(g.stream), "cuStreamSynchronize");
  unsigned words[4] = {};
  for (CUdeviceptr at : {data, data + g.bytes - 16}) {
    check(drv().cuMemcpyDtoH_v2(words, at, sizeof words), "cuMemcpyDtoH");
    if (words[0] != 0x5a5a5a5au || words[3] != (0x5a5a5a5au ^ 3u)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-bandwidth", "kernel read/write bandwidth, pool memory vs cuMemAlloc");
  options.add("size", "1G", "bytes each kernel reads or writes (a multiple of 16)");
  options.add("reps", "50", "timed launches per kernel and memory");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);
  g.bytes = options.size("size") / 16 * 16;
  const int reps = static_cast<int>(options.integer("reps"));

  const Device device = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-bandwidth", device);
  auto load = reinterpret_cast<ModuleLoadData>(driver::real_symbol("cuModuleLoadData"));
  auto get = reinterpret_cast<ModuleGetFunction>(driver::real_symbol("cuModuleGetFunction"));
  g.launch = reinterpret_cast<LaunchKernel>(driver::real_symbol("cuLaunchKernel"));
  g.elapsed = drv().cuEventElapsedTime_v2 != nullptr
                  ? drv().cuEventElapsedTime_v2
                  : reinterpret_cast<ElapsedTime>(driver::real_symbol("cuEventElapsedTime"));
  if (device.simulated || load == nullptr || get == nullptr || g.launch == nullptr || g.elapsed == nullptr) {
    std::printf("uvmpool-bench-bandwidth needs a GPU: this driver runs no kernels (%s); nothing measured.\n",
                device.simulated ? "simulated" : "no cuModuleLoadData/cuLaunchKernel");
    summary_line("bandwidth", "skipped: needs a GPU");
    return 0;
  }

  const driver::Table& d = drv();
  CUmodule module = nullptr;
  check(load(&module, kBandwidthPtx), "cuModuleLoadData");
  check(get(&g.read, module, "read_bytes"), "cuModuleGetFunction(read_bytes)");
  check(get(&g.write, module, "write_bytes"), "cuModuleGetFunction(write_bytes)");
  int sms = 0;
  check(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device.device), "cuDeviceGetAttribute");
  g.grid = static_cast<unsigned>(sms) * 8;  // 8 blocks of 256 threads: every SM full
  check(d.cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.cuEventCreate(&g.start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&g.stop, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuMemAlloc_v2(&g.sink, 16), "cuMemAlloc(sink)");

  CUdeviceptr native = 0, ours = 0;
  check(d.cuMemAlloc_v2(&native, g.bytes), "cuMemAlloc");
  pool::Pool pool(d, pool::PoolConfig{});
  check(pool.allocate(&ours, g.bytes), "Pool::allocate");
  const pool::DeviceStats stats = pool.stats(device.device);

  // Clocks up before anything is timed; then native and pool take turns per kernel.
  for (int i = 0; i < 20; ++i) {
    for (CUdeviceptr data : {native, ours}) {
      check(launch(true, data), "cuLaunchKernel(read_bytes)");
      check(launch(false, data), "cuLaunchKernel(write_bytes)");
    }
  }
  check(d.cuStreamSynchronize(g.stream), "cuStreamSynchronize");
  for (bool read : {true, false})
    for (auto [memory, data] : {std::pair{"native", native}, std::pair{"pool", ours}}) {
      const std::string name = std::string(read ? "read/" : "write/") + memory;
      benchmark::RegisterBenchmark(name.c_str(), kernel_bench, read, data, name)
          ->UseManualTime()
          ->Iterations(reps)
          ->Unit(benchmark::kMicrosecond);
    }
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");

  Figures figures("kernel bandwidth over " + format_size(g.bytes) + ", median of " + std::to_string(reps) +
                  " launches (pool / native)");
  std::string summary, pool_text, native_text;
  double low = -1;
  for (const char* kernel : {"read", "write"}) {
    const double n = median(g_seconds[std::string(kernel) + "/native"]);
    const double p = median(g_seconds[std::string(kernel) + "/pool"]);
    if (n <= 0 || p <= 0) {
      figures.row(std::string(kernel) + " pool / native", "not run", ">= 0.99");
      continue;
    }
    const double gbs_native = static_cast<double>(g.bytes) / n / 1e9, gbs_pool = static_cast<double>(g.bytes) / p / 1e9;
    const double ratio = gbs_pool / gbs_native;
    figures.row(std::string(kernel) + " native", fixed(gbs_native, 0) + " GB/s");
    figures.row(std::string(kernel) + " pool", fixed(gbs_pool, 0) + " GB/s");
    figures.row(std::string(kernel) + " pool / native", fixed(ratio, 3), ">= 0.99");
    low = low < 0 ? ratio : std::min(low, ratio);
    pool_text += std::string(pool_text.empty() ? "" : ", ") + kernel + " " + fixed(gbs_pool, 0) + " GB/s";
    native_text += std::string(native_text.empty() ? "" : ", ") + kernel + " " + fixed(gbs_native, 0) + " GB/s";
    summary += std::string(summary.empty() ? "" : ", ") + kernel + " " + fixed(ratio, 3) +
               (ratio >= kTargetRatio ? "" : " BELOW TARGET");
  }
  figures.note("pool allocation: " + std::to_string(stats.chunks_held) + " chunks of " +
               format_size(stats.chunk_size) + ", " + std::to_string(stats.stitched_maps) + " stitched mapping(s)");
  const bool ok = pattern_ok(ours) && pattern_ok(native);
  if (!ok) figures.note("WRONG DATA: the write kernel's pattern did not read back");
  figures.print();
  summary_line("bandwidth", "pool/native " + summary + " (target >= 0.99)" + (ok ? "" : " WRONG DATA"));
  Score sc;
  sc.row = "2";
  sc.what = "kernel bandwidth over a " + format_size(g.bytes) + " pooled (stitched) allocation vs cuMemAlloc memory";
  sc.uvmpool = pool_text + (ok ? "" : " WRONG DATA");
  sc.baseline = "cuMemAlloc: " + native_text;
  sc.ratio = low;
  sc.ratio_is = "uvmpool / native bandwidth, the lower of read and write";
  sc.target = ">= 0.99";
  sc.met = low >= kTargetRatio && ok ? 1 : 0;
  sc.ceiling = "HBM bandwidth (the native figure): the same pages, only the mapping differs";
  score_line(sc);

  CUresult result = CUDA_SUCCESS;
  pool.deallocate(ours, &result);
  d.cuMemFree_v2(native);
  d.cuMemFree_v2(g.sink);
  return ok ? 0 : 1;
}
