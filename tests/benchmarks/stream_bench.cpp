// uvmpool-bench-stream: a program that needs 1.5x and 3x the device memory it is given, streaming
// over all of it with kernels (scoreboard row 3), and what the same program does without uvmpool.
//
// For each factor k (--factors): a pool whose device budget is L (--limit) serves buffers of
// --buffer bytes until k x L are live; past L they spill to pinned host memory mapped into the same
// ranges. Then a read pass and a write pass over every buffer (one kernel launch per buffer; the
// pass's time is the sum of the launches' event times, median of --reps passes). Roofline of a pass:
// device bytes at HBM bandwidth plus host bytes at zero-copy bandwidth, each measured here with the
// same kernel (cuMemAlloc memory; cuMemHostAlloc(DEVICEMAP) memory). Efficiency = roofline time /
// measured time; target at least 0.9. The write pass's pattern is read back at both ends of each buffer.
//
// Native: the same program on the same device memory without uvmpool. Ballast (one cuMemAlloc of all
// free memory but L) leaves it L; it then asks cuMemAlloc for the same buffers, and the driver
// refuses once L is used: the program cannot run at all.
//
// The simulated driver runs no kernels: there the split and the data are checked, nothing is timed.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernel_runner.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

constexpr double kTargetEff = 0.9;

std::uint64_t device_used() {
  std::size_t free_b = 0, total_b = 0;
  check(drv().cuMemGetInfo_v2(&free_b, &total_b), "cuMemGetInfo");
  return total_b - free_b;
}

// A pool whose device budget is `limit` beyond what the device uses now (the budget check counts
// others' use), no headroom, so the split falls where the program's own limit would put it.
std::unique_ptr<pool::Pool> limited_pool(std::uint64_t limit, std::uint64_t host_cap) {
  pool::PoolConfig c;
  c.spill = true;
  c.headroom = 0;
  c.device_limit = config::Size{device_used() + limit, 0, false};
  c.host_limit = config::Size{host_cap, 0, false};
  return std::make_unique<pool::Pool>(drv(), c);
}

struct Pass {
  double read = -1, write = -1;  // seconds per pass over everything
};

Pass stream(KernelRunner& k, const std::vector<CUdeviceptr>& buffers, std::uint64_t size, int reps) {
  Pass p;
  std::vector<double> reads, writes;
  for (int r = 0; r <= reps; ++r) {  // the first pass of each warms translations and is not kept
    double rs = 0, ws = 0;
    for (CUdeviceptr b : buffers) rs += k.read_once(b, size);
    for (CUdeviceptr b : buffers) ws += k.write_once(b, size, 0x57000000u + static_cast<unsigned>(r));
    if (r > 0) reads.push_back(rs), writes.push_back(ws);
  }
  p.read = median(reads);
  p.write = median(writes);
  return p;
}

// The last write pass's pattern (value v, v^1, v^2, v^3 per 16 bytes) at both ends of each buffer.
bool pattern_ok(const std::vector<CUdeviceptr>& buffers, std::uint64_t size, unsigned value) {
  for (CUdeviceptr b : buffers)
    for (CUdeviceptr at : {b, b + size - 16}) {
      unsigned w[4] = {};
      check(drv().cuMemcpyDtoH_v2(w, at, sizeof w), "cuMemcpyDtoH");
      if (w[0] != value || w[3] != (value ^ 3u)) return false;
    }
  return true;
}

// Without the kernels (the simulator): write a marker through cuMemcpy at both ends and read it back.
bool markers_ok(const std::vector<CUdeviceptr>& buffers, std::uint64_t size) {
  for (CUdeviceptr b : buffers)
    for (CUdeviceptr at : {b, b + size - 16}) {
      const std::uint64_t want[2] = {0x53545245414dull ^ at, ~at};
      std::uint64_t got[2] = {};
      check(drv().cuMemcpyHtoD_v2(at, want, sizeof want), "cuMemcpyHtoD");
      check(drv().cuMemcpyDtoH_v2(got, at, sizeof got), "cuMemcpyDtoH");
      if (got[0] != want[0] || got[1] != want[1]) return false;
    }
  return true;
}

std::vector<double> factors(const std::string& text) {
  std::vector<double> out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const double v = std::atof(text.substr(start, comma - start).c_str());
    if (v < 1.0 || v > 16.0) {
      std::fprintf(stderr, "--factors: %s is not a factor from 1 to 16\n", text.substr(start, comma - start).c_str());
      std::exit(2);
    }
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

// What the program does without uvmpool on L bytes of device memory: how far cuMemAlloc gets.
std::string native_run(std::uint64_t limit, std::uint64_t size, std::uint64_t want) {
  std::size_t free_b = 0, total_b = 0;
  check(drv().cuMemGetInfo_v2(&free_b, &total_b), "cuMemGetInfo");
  CUdeviceptr ballast = 0;
  const std::uint64_t ballast_bytes = free_b > limit ? (free_b - limit) & ~((2ull << 20) - 1) : 0;
  if (ballast_bytes > 0 && drv().cuMemAlloc_v2(&ballast, ballast_bytes) != CUDA_SUCCESS)
    return "ballast of " + format_size(ballast_bytes) + " refused: not measured";
  std::vector<CUdeviceptr> got;
  CUresult last = CUDA_SUCCESS;
  while (got.size() * size < want) {
    CUdeviceptr p = 0;
    last = drv().cuMemAlloc_v2(&p, size);
    if (last != CUDA_SUCCESS) break;
    got.push_back(p);
  }
  const char* name = nullptr;
  drv().cuGetErrorName(last, &name);
  const std::string text = last == CUDA_SUCCESS
                               ? "all " + format_size(want) + " allocated (the device limit did not hold)"
                               : std::string(name ? name : "error") + " after " + format_size(got.size() * size) +
                                     " of " + format_size(want);
  for (CUdeviceptr p : got) drv().cuMemFree_v2(p);
  if (ballast) drv().cuMemFree_v2(ballast);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("UVMPOOL_LOG_LEVEL", "error", 0);  // spill log lines would bury the figures
  Options options("uvmpool-bench-stream", "streaming over 1.5x and 3x the device limit, against the roofline");
  options.add("limit", "4G", "device memory the program is given (the pool's budget; the native run's free memory)");
  options.add("factors", "1.5,3", "what the program needs, as multiples of --limit");
  options.add("buffer", "512M", "size of each buffer (a multiple of the chunk)");
  options.add("reps", "3", "timed passes (median)");
  options.add("zc-size", "1G", "the cuMemHostAlloc buffer of the zero-copy baseline");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);

  const Device dev = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-stream", dev);
  const driver::Table& d = drv();
  const std::uint64_t chunk = dev.granularity;
  std::uint64_t limit = options.size("limit"), size = options.size("buffer");
  if (dev.simulated) limit = std::min<std::uint64_t>(limit, 512ull << 20), size = std::min<std::uint64_t>(size, 64ull << 20);
  size = std::max<std::uint64_t>(size / chunk, 1) * chunk;
  const std::vector<double> ks = factors(options.text("factors"));
  const int reps = static_cast<int>(options.integer("reps"));

  KernelRunner k;
  const bool gpu = k.open(dev);
  double hbm_r = -1, hbm_w = -1, zc_r = -1, zc_w = -1;  // bytes per second
  Figures base("the two ceilings, with the same kernels");
  if (gpu) {
    const std::uint64_t zc_size = std::max<std::uint64_t>(options.size("zc-size") / chunk, 1) * chunk;
    CUdeviceptr native = 0, zc_dev = 0;
    void* zc_host = nullptr;
    check(d.cuMemAlloc_v2(&native, size), "cuMemAlloc");
    check(d.cuMemHostAlloc(&zc_host, zc_size, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    check(d.cuMemHostGetDevicePointer_v2(&zc_dev, zc_host, 0), "cuMemHostGetDevicePointer");
    for (int i = 0; i < 20; ++i) k.read_once(native, size);  // clocks up
    hbm_r = static_cast<double>(size) / k.read_seconds(native, size, 5);
    hbm_w = static_cast<double>(size) / k.write_seconds(native, size, 5);
    zc_r = static_cast<double>(zc_size) / k.read_seconds(zc_dev, zc_size, 3);
    zc_w = static_cast<double>(zc_size) / k.write_seconds(zc_dev, zc_size, 3);
    check(d.cuMemFree_v2(native), "cuMemFree");
    check(d.cuMemFreeHost(zc_host), "cuMemFreeHost");
    base.row("HBM read / write (cuMemAlloc " + format_size(size) + ")", fixed(hbm_r / 1e9, 0) + " / " + fixed(hbm_w / 1e9, 0) + " GB/s");
    base.row("zero-copy read / write (cuMemHostAlloc " + format_size(zc_size) + ")",
             fixed(zc_r / 1e9, 1) + " / " + fixed(zc_w / 1e9, 1) + " GB/s");
  } else {
    base.note(std::string("no kernels on this driver (") + (dev.simulated ? "simulated" : "no cuLaunchKernel") +
              "): the split and the data are checked, nothing is timed");
  }
  base.print();

  bool data_ok = true;
  std::string summary;
  for (const double factor : ks) {
    const std::uint64_t want = static_cast<std::uint64_t>(factor * static_cast<double>(limit)) / size * size;
    const std::string tag = fixed(factor, 1) + "x";
    Figures f(tag + " the limit: " + format_size(want) + " in " + format_size(size) + " buffers, device limit " +
              format_size(limit));
    auto pool = limited_pool(limit, want + (1ull << 30));
    std::vector<CUdeviceptr> buffers;
    for (std::uint64_t have = 0; have < want; have += size) {
      CUdeviceptr p = 0;
      check(pool->allocate(&p, size), "Pool::allocate");
      buffers.push_back(p);
    }
    const pool::DeviceStats s = pool->stats(dev.device);
    const std::uint64_t host = std::min(s.live_host_bytes, want), device_bytes = want - host;
    f.row("device + host", format_size(device_bytes) + " + " + format_size(host) + " (" +
                               std::to_string(s.spilled_allocations) + " of " + std::to_string(buffers.size()) +
                               " buffers spilled)");
    Score sc;
    sc.row = factor < 2 ? "3a" : "3b";
    sc.what = "streaming kernels (read pass, write pass) over " + tag + " the device limit (" + format_size(want) +
              " on " + format_size(limit) + ")";
    sc.ratio_is = "roofline time / measured time, read and write passes together";
    sc.target = ">= 0.9";
    sc.ceiling = "roofline: device bytes at HBM speed + host bytes at zero-copy speed, both measured in this run";
    if (gpu) {
      const Pass p = stream(k, buffers, size, reps);
      const auto roof = [&](double hbm, double zc) {
        return static_cast<double>(device_bytes) / hbm + static_cast<double>(host) / zc;
      };
      const double rr = roof(hbm_r, zc_r), rw = roof(hbm_w, zc_w);
      const double eff_r = rr / p.read, eff_w = rw / p.write, eff = (rr + rw) / (p.read + p.write);
      f.row("read pass: measured, roofline", format_seconds(p.read) + " (" +
                fixed(static_cast<double>(want) / p.read / 1e9, 1) + " GB/s), " + format_seconds(rr));
      f.row("write pass: measured, roofline", format_seconds(p.write) + " (" +
                fixed(static_cast<double>(want) / p.write / 1e9, 1) + " GB/s), " + format_seconds(rw));
      f.row("efficiency read / write / both", fixed(eff_r, 2) + " / " + fixed(eff_w, 2) + " / " + fixed(eff, 2), ">= 0.9");
      const bool ok = pattern_ok(buffers, size, 0x57000000u + static_cast<unsigned>(reps));
      if (!ok) f.note("WRONG DATA: the write pass's pattern did not read back");
      data_ok = data_ok && ok;
      sc.uvmpool = "runs: read " + fixed(static_cast<double>(want) / p.read / 1e9, 1) + " GB/s, write " +
                   fixed(static_cast<double>(want) / p.write / 1e9, 1) + " GB/s (" + format_size(host) +
                   " in host memory; efficiency read " + fixed(eff_r, 2) + ", write " + fixed(eff_w, 2) + ")" +
                   (ok ? "" : " WRONG DATA");
      sc.ratio = eff;
      sc.met = eff >= kTargetEff && ok ? 1 : 0;
      summary += (summary.empty() ? "" : " ") + tag + "=" + fixed(eff, 2) + (eff < kTargetEff ? "!" : "");
    } else {
      const bool ok = markers_ok(buffers, size);
      data_ok = data_ok && ok;
      sc.uvmpool = "split " + format_size(device_bytes) + " + " + format_size(host) + (ok ? ", data ok" : ", WRONG DATA");
      summary += (summary.empty() ? "" : " ") + tag + "=n/a";
    }
    CUresult result = CUDA_SUCCESS;
    for (CUdeviceptr p : buffers) {
      pool->deallocate(p, &result);
      check(result, "Pool::deallocate");
    }
    pool.reset();
    const std::string native = native_run(limit, size, want);
    f.row("native (cuMemAlloc with " + format_size(limit) + " free)", native);
    sc.baseline = "native: " + native;
    f.print();
    score_line(sc);
  }
  summary_line("stream", "efficiency vs roofline " + summary + (gpu ? " (target >= 0.9)" : " (needs a GPU)") +
                             (data_ok ? "" : " WRONG DATA"));
  return data_ok ? 0 : 1;
}
