// uvmpool-bench-spill: what spilling to pinned host memory costs (src/pool/host_tier.h).
//
// 1. Allocation latency of a spill served from the host reserve. A fresh pool whose device budget
//    is already used up (so every allocation lies wholly in host chunks) fills its reserve with
//    Pool::fill_host_reserve, then makes many live allocations of each size, each call timed.
//    Target: p99 at most 50 us per 2 MiB. Twice: with the background thread stopped (the reserve
//    path alone), and with it refilling the reserve during the calls, as in a real program.
//    Baselines in the same run: the same allocations from an empty reserve (drained before each
//    call, so each pins inline), and cuMemHostAlloc(DEVICEMAP) of the same size (what a program
//    pays to pin memory itself).
// 2. Kernel read bandwidth over one allocation that is 0, 25, 50 and 100% spilled, against its
//    roofline: device bytes at HBM read bandwidth plus host bytes at zero-copy read bandwidth, both
//    measured here with the same kernel (cuMemAlloc memory; cuMemHostAlloc(DEVICEMAP) memory through
//    cuMemHostGetDevicePointer). Efficiency = roofline time / measured time. Target: at least 0.9.
//    The simulated driver runs no kernels: there only the split is made and checked.
// Figures only: the exit status is non-zero for errors (wrong data included), never for a target.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "driver/real_driver.h"
#include "kernels/bandwidth_ptx.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTargetUs = 50;    // p99 per 2 MiB, from the reserve
constexpr double kTargetEff = 0.9;  // roofline time / measured time
constexpr std::uint64_t k2M = 2ull << 20;

using ModuleLoadData = CUresult (*)(CUmodule*, const void*);
using ModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, CUstream, void**, void**);
using ElapsedTime = CUresult (*)(float*, CUevent, CUevent);

Device g_dev;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Nearest rank: with few samples p99 is the largest, which is what it should say.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const std::size_t rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

double per_2m_us(double seconds, std::uint64_t size) {
  return seconds * 1e6 * static_cast<double>(k2M) / static_cast<double>(size);
}
std::string us2m(double seconds, std::uint64_t size) { return seconds < 0 ? "n/a" : fixed(per_2m_us(seconds, size), 1); }

// "2M", "64M", "1G": for the one-line summary.
std::string short_size(std::uint64_t b) {
  if (b % (1ull << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b % (1ull << 20) == 0) return std::to_string(b >> 20) + "M";
  return std::to_string(b >> 10) + "K";
}

std::uint64_t device_used() {
  std::size_t free_b = 0, total_b = 0;
  check(drv().cuMemGetInfo_v2(&free_b, &total_b), "cuMemGetInfo");
  return total_b - free_b;
}

// A pool that spills whatever goes past `device_bytes` more than the device uses right now (the
// budget check is held + others + want <= limit, others being that use). No headroom, so the split
// is exactly where we put it. A limit of 1 byte rather than 0 keeps clear of any "0 = unset".
std::unique_ptr<pool::Pool> spill_pool(std::uint64_t device_bytes, std::uint64_t reserve, std::uint64_t host_cap,
                                       bool background) {
  pool::PoolConfig c;
  c.spill = true;
  c.headroom = 0;
  c.device_limit = config::Size{std::max<std::uint64_t>(device_used() + device_bytes, 1), 0, false};
  c.host_limit = config::Size{host_cap, 0, false};
  c.host_reserve = reserve;  // the reserve's base: what fill_host_reserve put there is not given back
  auto pool = std::make_unique<pool::Pool>(drv(), c);
  // Without the thread nothing pins behind the timed calls: every spill takes from the reserve or
  // pins inline, and kernel reads are not timed against concurrent pinning.
  if (!background) pool->stop_background();
  return pool;
}

// ---- part 1: allocation latency --------------------------------------------------------------

struct AllocRun {
  std::vector<double> seconds;         // each call
  std::vector<double> inline_seconds;  // the calls that pinned inline
  std::uint64_t live_host = 0, spilled = 0, pinned_inline = 0, background_pinned = 0;
  std::uint64_t left_after_release = 0;  // chunks (either tier) still held after release_idle()
  double fill_seconds = 0;
};

// `count` live allocations of `size`, wholly host. With `reserve` > 0 the reserve is filled first;
// with 0, release_idle() drains it before each call, so each call pins inline.
AllocRun pool_run(std::uint64_t size, int count, std::uint64_t reserve, bool background) {
  AllocRun run;
  const int dev = g_dev.device;
  // Room for the reserve, the thread's refill and the inline batch; the caller keeps it < 4 GiB.
  const std::uint64_t host_cap = 2 * reserve + count * size + (64ull << 20);
  auto pool = spill_pool(0, reserve, host_cap, background);
  if (reserve > 0) {
    const Clock::time_point start = Clock::now();
    check(pool->fill_host_reserve(dev, reserve), "Pool::fill_host_reserve");
    run.fill_seconds = since(start);
  }
  const pool::DeviceStats before = pool->stats(dev);
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < count; ++i) {
    if (reserve == 0) pool->release_idle();
    const std::uint64_t inline_before = pool->stats(dev).host_chunks_pinned_inline;
    CUdeviceptr p = 0;
    const Clock::time_point start = Clock::now();
    const CUresult r = pool->allocate(&p, size);
    const double s = since(start);
    check(r, "Pool::allocate (spilled)");
    run.seconds.push_back(s);
    if (pool->stats(dev).host_chunks_pinned_inline != inline_before) run.inline_seconds.push_back(s);
    live.push_back(p);
  }
  const pool::DeviceStats after = pool->stats(dev);
  run.live_host = after.live_host_bytes;
  run.spilled = after.spilled_allocations - before.spilled_allocations;
  run.pinned_inline = after.host_chunks_pinned_inline - before.host_chunks_pinned_inline;
  const std::uint64_t filled = reserve / std::max<std::uint64_t>(after.chunk_size, 1) + run.pinned_inline;
  if (reserve > 0 && after.host_chunks_held > filled) run.background_pinned = after.host_chunks_held - filled;
  CUresult result = CUDA_SUCCESS;
  for (CUdeviceptr p : live) {
    pool->deallocate(p, &result);
    check(result, "Pool::deallocate");
  }
  pool->release_idle();
  const pool::DeviceStats end = pool->stats(dev);
  run.left_after_release = end.chunks_held + end.host_chunks_held;
  return run;
}

std::vector<double> host_alloc_run(std::uint64_t size, int count) {
  std::vector<double> seconds;
  std::vector<void*> live;
  for (int i = 0; i < count; ++i) {
    void* p = nullptr;
    const Clock::time_point start = Clock::now();
    const CUresult r = drv().cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_DEVICEMAP);
    seconds.push_back(since(start));
    check(r, "cuMemHostAlloc");
    live.push_back(p);
  }
  for (void* p : live) check(drv().cuMemFreeHost(p), "cuMemFreeHost");
  return seconds;
}

// ---- part 2: read bandwidth ------------------------------------------------------------------

struct Gpu {
  LaunchKernel launch = nullptr;
  ElapsedTime elapsed = nullptr;
  CUfunction read = nullptr;
  unsigned grid = 0, block = 256;
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  CUdeviceptr sink = 0;
};
Gpu g;

// False where no kernel can run (the simulated driver).
bool open_kernels() {
  auto load = reinterpret_cast<ModuleLoadData>(driver::real_symbol("cuModuleLoadData"));
  auto get = reinterpret_cast<ModuleGetFunction>(driver::real_symbol("cuModuleGetFunction"));
  g.launch = reinterpret_cast<LaunchKernel>(driver::real_symbol("cuLaunchKernel"));
  g.elapsed = drv().cuEventElapsedTime_v2 != nullptr
                  ? drv().cuEventElapsedTime_v2
                  : reinterpret_cast<ElapsedTime>(driver::real_symbol("cuEventElapsedTime"));
  if (g_dev.simulated || load == nullptr || get == nullptr || g.launch == nullptr || g.elapsed == nullptr) return false;
  const driver::Table& d = drv();
  CUmodule module = nullptr;
  check(load(&module, kBandwidthPtx), "cuModuleLoadData");
  check(get(&g.read, module, "read_bytes"), "cuModuleGetFunction(read_bytes)");
  int sms = 0;
  check(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev.device), "cuDeviceGetAttribute");
  // Every SM full (8 blocks of 256 threads), 4 independent 16-byte loads per thread per trip: about
  // 17 MB in flight, far beyond PCIe's bandwidth x latency (about 50 GB/s x 2 us = 100 KB).
  g.grid = static_cast<unsigned>(sms) * 8;
  check(d.cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.cuEventCreate(&g.start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&g.stop, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuMemAlloc_v2(&g.sink, 16), "cuMemAlloc(sink)");
  return true;
}

double read_once(CUdeviceptr data, std::uint64_t bytes) {
  std::size_t words = bytes / 16;
  void* args[] = {&data, &words, &g.sink};
  check(drv().cuEventRecord(g.start, g.stream), "cuEventRecord");
  check(g.launch(g.read, g.grid, 1, 1, g.block, 1, 1, 0, g.stream, args, nullptr), "cuLaunchKernel(read_bytes)");
  check(drv().cuEventRecord(g.stop, g.stream), "cuEventRecord");
  check(drv().cuEventSynchronize(g.stop), "cuEventSynchronize");
  float ms = 0;
  check(g.elapsed(&ms, g.start, g.stop), "cuEventElapsedTime");
  return ms / 1e3;
}

// Median of `reps` reads after an untimed one (which also warms the GPU's translations).
double read_seconds(CUdeviceptr data, std::uint64_t bytes, int reps) {
  read_once(data, bytes);
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) s.push_back(read_once(data, bytes));
  return median(s);
}

// Writes a marker at each offset and reads it back: every chunk of both tiers answers through the
// one range, at the offsets where the split should be.
bool markers_ok(CUdeviceptr base, const std::vector<std::uint64_t>& offsets) {
  for (std::uint64_t at : offsets) {
    const std::uint64_t want[2] = {0x5350494c4cull ^ at, ~at};
    std::uint64_t got[2] = {};
    check(drv().cuMemcpyHtoD_v2(base + at, want, sizeof want), "cuMemcpyHtoD");
    check(drv().cuMemcpyDtoH_v2(got, base + at, sizeof got), "cuMemcpyDtoH");
    if (got[0] != want[0] || got[1] != want[1]) return false;
  }
  return true;
}

std::vector<int> percents(const std::string& text) {
  std::vector<int> out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const int v = std::atoi(text.substr(start, comma - start).c_str());
    if (v < 0 || v > 100) {
      std::fprintf(stderr, "--fractions: %d is not a percentage\n", v);
      std::exit(2);
    }
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("UVMPOOL_LOG_LEVEL", "error", 0);  // spill log lines would bury the figures
  Options options("uvmpool-bench-spill", "spill: allocation latency from the host reserve; read bandwidth of spilled memory");
  options.add("sizes", "2M,8M,64M", "part 1: allocation sizes");
  options.add("count", "200", "part 1: live allocations per size from the reserve (at most half of it)");
  options.add("baseline-count", "40", "part 1: allocations per size for the inline and cuMemHostAlloc baselines");
  options.add("reserve", "1536M", "part 1: host reserve filled before each size's allocations");
  options.add("read-size", "4G", "part 2: the allocation read by the kernel (256 MiB at most on the sim)");
  options.add("fractions", "0,25,50,100", "part 2: percentages of it spilled");
  options.add("zc-size", "1G", "part 2: the cuMemHostAlloc buffer of the zero-copy baseline");
  options.add("reps", "5", "part 2: timed reads per memory (median)");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);

  g_dev = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-spill", g_dev);
  const driver::Table& d = drv();
  const int dev = g_dev.device;
  const std::uint64_t chunk = g_dev.granularity;
  auto round_chunks = [&](std::uint64_t b) { return std::max<std::uint64_t>(b / chunk, 1) * chunk; };
  const std::uint64_t reserve = round_chunks(options.size("reserve"));
  const int count = static_cast<int>(options.integer("count"));
  const int bcount = static_cast<int>(options.integer("baseline-count"));
  std::uint64_t read_size = round_chunks(options.size("read-size"));
  if (g_dev.simulated) read_size = std::min<std::uint64_t>(read_size, 256ull << 20);
  const int reps = static_cast<int>(options.integer("reps"));
  const std::vector<int> fractions = percents(options.text("fractions"));  // checked before any work

  // ---- part 1
  Figures alloc("spill allocation latency, wholly to host: us per 2 MiB, p50 / p99");
  std::string quiet_summary, refill_summary;
  for (const std::uint64_t size : options.sizes("sizes")) {
    // Half the reserve at most: the reserve never runs dry, and below half its target stays put.
    const int n = static_cast<int>(std::min<std::uint64_t>(count, std::max<std::uint64_t>(reserve / 2 / size, 1)));
    const int nb = std::min(n, bcount);
    const AllocRun quiet = pool_run(size, n, reserve, false);
    const AllocRun refill = pool_run(size, n, reserve, true);
    const AllocRun inl = pool_run(size, nb, 0, false);
    const std::vector<double> pin = host_alloc_run(size, nb);
    const std::string tag = format_size(size);
    auto p50_p99 = [&](const std::vector<double>& s) {
      return us2m(percentile(s, 0.5), size) + " / " + us2m(percentile(s, 0.99), size);
    };
    alloc.row(tag + ", reserve, no refill (" + std::to_string(n) + ")", p50_p99(quiet.seconds), "p99 <= 50");
    alloc.row(tag + ", reserve, thread refilling (" + std::to_string(n) + ")", p50_p99(refill.seconds), "p99 <= 50");
    alloc.row(tag + ", empty reserve: inline pin (" + std::to_string(inl.inline_seconds.size()) + ")",
              p50_p99(inl.inline_seconds));
    alloc.row(tag + ", cuMemHostAlloc (" + std::to_string(nb) + ")", p50_p99(pin));
    double inline_total = 0;
    for (double s : inl.inline_seconds) inline_total += s;
    const std::uint64_t inline_chunks = inl.pinned_inline;
    alloc.note(tag + ": reserve runs: live_host " + format_size(quiet.live_host) + " / " +
               format_size(refill.live_host) + " of " + format_size(n * size) + ", spilled " +
               std::to_string(quiet.spilled) + " / " + std::to_string(refill.spilled) + ", pinned_inline " +
               std::to_string(quiet.pinned_inline) + " / " + std::to_string(refill.pinned_inline) +
               ", background-pinned " + std::to_string(quiet.background_pinned) + " / " +
               std::to_string(refill.background_pinned) + " chunks; fill_host_reserve(" + format_size(reserve) +
               ") " + format_seconds(quiet.fill_seconds) + " (" + us2m(quiet.fill_seconds, reserve) + " us/2MiB)");
    alloc.note(tag + ": empty reserve: " + std::to_string(inl.inline_seconds.size()) + "/" + std::to_string(nb) +
               " calls pinned inline, " + std::to_string(inline_chunks) + " chunks (" +
               (inline_chunks ? us2m(inline_total / static_cast<double>(inline_chunks), chunk) : std::string("n/a")) +
               " us per chunk pinned), live_host " + format_size(inl.live_host) + " of " + format_size(nb * size));
    for (const AllocRun* r : {&quiet, &refill})
      if (r->live_host != n * size) alloc.note("  NOT ALL HOST: the budget let part of it onto the device");
    if (quiet.pinned_inline + refill.pinned_inline != 0) alloc.note("  a reserve run pinned inline: the reserve ran dry");
    // With the thread stopped, nothing can pin after release_idle: anything left is a leak.
    for (const AllocRun* r : {&quiet, &inl})
      if (r->left_after_release != 0)
        alloc.note("  release_idle left " + std::to_string(r->left_after_release) + " chunks held with nothing live");
    auto add = [&](std::string* summary, const AllocRun& r) {
      const double p99 = percentile(r.seconds, 0.99);
      *summary += (summary->empty() ? "" : " ") + short_size(size) + "=" + us2m(p99, size) +
                  (per_2m_us(p99, size) > kTargetUs ? "!" : "");
    };
    add(&quiet_summary, quiet);
    add(&refill_summary, refill);
  }
  if (g_dev.simulated) alloc.note("simulated driver: these times say nothing about a GPU");
  alloc.print();

  // ---- part 2: baselines first, then a fresh pool per fraction
  const bool gpu = open_kernels();
  double hbm = -1, zc = -1;  // bytes per second
  Figures bw("kernel read of " + format_size(read_size) + " partly spilled, against the roofline (device/HBM + host/zero-copy)");
  if (gpu) {
    const std::uint64_t zc_size = round_chunks(options.size("zc-size"));
    CUdeviceptr native = 0, zc_dev = 0;
    void* zc_host = nullptr;
    check(d.cuMemAlloc_v2(&native, read_size), "cuMemAlloc");
    check(d.cuMemHostAlloc(&zc_host, zc_size, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    check(d.cuMemHostGetDevicePointer_v2(&zc_dev, zc_host, 0), "cuMemHostGetDevicePointer");
    for (int i = 0; i < 20; ++i) read_once(native, read_size);  // clocks up
    hbm = static_cast<double>(read_size) / read_seconds(native, read_size, reps);
    zc = static_cast<double>(zc_size) / read_seconds(zc_dev, zc_size, reps);
    check(d.cuMemFree_v2(native), "cuMemFree");
    check(d.cuMemFreeHost(zc_host), "cuMemFreeHost");
    bw.row("HBM read, cuMemAlloc " + format_size(read_size), fixed(hbm / 1e9, 0) + " GB/s");
    bw.row("zero-copy read, cuMemHostAlloc " + format_size(zc_size), fixed(zc / 1e9, 1) + " GB/s");
    if (zc < 40e9) bw.note("zero-copy read below 40 GB/s: the read kernel may need more loads in flight");
  }
  std::string bw_summary;
  bool data_ok = true;
  for (const int percent : fractions) {
    const std::uint64_t host_want = read_size * static_cast<std::uint64_t>(percent) / 100 / chunk * chunk;
    auto pool = spill_pool(read_size - host_want, 0, read_size + (256ull << 20), false);
    CUdeviceptr p = 0;
    const Clock::time_point start = Clock::now();
    check(pool->allocate(&p, read_size), "Pool::allocate (partly spilled)");
    const double alloc_s = since(start);
    const pool::DeviceStats s = pool->stats(dev);
    const std::uint64_t host = std::min(s.live_host_bytes, read_size), dev_bytes = read_size - host;
    const bool ok = markers_ok(p, {0, dev_bytes >= 16 ? dev_bytes - 16 : 0, std::min(dev_bytes, read_size - 16),
                                   read_size - 16});
    data_ok = data_ok && ok;
    const std::string name = std::to_string(percent) + "%";
    bw.row(name + " spilled (" + format_size(host_want) + " asked): device + host", format_size(dev_bytes) + " + " +
                                                                                     format_size(host));
    bw.note(name + ": " + std::to_string(s.host_chunks_mapped) + " host chunks mapped (" +
            std::to_string(s.host_chunks_pinned_inline) + " pinned inline), allocated in " + format_seconds(alloc_s) +
            (host != host_want ? "; SPLIT DIFFERS from the one asked" : "") + (ok ? "" : "; WRONG DATA at a marker"));
    std::string eff_text = "n/a";
    if (gpu) {
      const double measured = read_seconds(p, read_size, reps);
      const double roofline = static_cast<double>(dev_bytes) / hbm + static_cast<double>(host) / zc;
      const double eff = roofline / measured;
      bw.row(name + " spilled: read, roofline", format_seconds(measured) + " (" +
                 fixed(static_cast<double>(read_size) / measured / 1e9, 1) + " GB/s), " + format_seconds(roofline));
      bw.row(name + " spilled: efficiency", fixed(eff, 2), ">= 0.9");
      eff_text = fixed(eff, 2) + (eff < kTargetEff ? "!" : "");
    }
    bw_summary += (bw_summary.empty() ? "" : " ") + name + "=" + eff_text;
    CUresult result = CUDA_SUCCESS;
    pool->deallocate(p, &result);
    check(result, "Pool::deallocate");
    pool->release_idle();
    const pool::DeviceStats end = pool->stats(dev);
    if (end.chunks_held + end.host_chunks_held != 0)
      bw.note(name + ": release_idle left " + std::to_string(end.chunks_held) + " device + " +
              std::to_string(end.host_chunks_held) + " host chunks held with nothing live");
  }
  if (!gpu)
    bw.note(std::string("no kernels on this driver (") + (g_dev.simulated ? "simulated" : "no cuLaunchKernel") +
            "): the split and the data are checked, bandwidth is not measured");
  bw.print();
  // "!" marks a figure that misses its target.
  summary_line("spill", "alloc p99 us/2MiB " + quiet_summary + ", refilling " + refill_summary +
                            " (target<=50) ; read eff " + bw_summary + (gpu ? " (target>=0.9)" : " (needs a GPU)") +
                            (data_ok ? "" : " WRONG DATA"));
  return data_ok ? 0 : 1;
}
