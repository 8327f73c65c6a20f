// uvmpool-bench-places: how many of a program's stream-ordered allocations get, step after step, the
// address they had the step before (src/pool/repeat_places.h). Tiering learns a step by its
// addresses (docs/tiering.md, "Frees that reach the pool"): one allocation a step at another address
// is enough to keep the launch sequence from repeating.
//
// It replays an allocation trace through the pool (Pool::allocate_async / deallocate_async on one
// stream, the host reserve's thread stopped so that the replay is the same every run): by default
// tests/benchmarks/data/row4b-async-h200.allocs, scoreboard row 4b's first 8 steps under PyTorch's
// `backend:cudaMallocAsync` on an H200, whose sizes repeat every 2813 allocations, replayed under the
// device limit it ran with. Reported per step: the allocations at the address of the allocation one
// period before, and the pool's repeat_places_kept / _missed. Not a timing: the figures are the same
// on any machine, so a CTest holds a floor on them. What it does not have: the program's kernels
// (frees complete at once) and tiering's moves (they change tiers, and so what placement finds).
#include <cstdio>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_common.h"
#include "config/options.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

struct Op {
  bool alloc;
  std::uint64_t id;
  std::uint64_t bytes;  // allocations only
};

std::vector<Op> read_ops(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "uvmpool-bench-places: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<Op> ops;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    char kind = 0;
    Op op{};
    words >> kind >> op.id;
    op.alloc = kind == 'a';
    if (op.alloc) words >> op.bytes;
    if (!words || (kind != 'a' && kind != 'f') || (op.alloc && op.bytes == 0)) {
      std::fprintf(stderr, "uvmpool-bench-places: %s:%d: not \"a <id> <bytes>\" or \"f <id>\"\n", path.c_str(), n);
      std::exit(2);
    }
    ops.push_back(op);
  }
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-places", "Stream-ordered allocations at the address of the step before, replayed from a trace.");
  options.add("trace", UVMPOOL_PLACES_TRACE, "allocation trace: lines \"a <id> <bytes>\" and \"f <id>\"");
  options.add("period", "2813", "allocations a step (the trace's)");
  options.add("limit", "11128M", "device limit (UVMPOOL_DEVICE_LIMIT) the trace ran under");
  options.parse(&argc, argv);
  const Device dev = open_device();
  print_header("uvmpool-bench-places", dev);
  const std::vector<Op> ops = read_ops(options.text("trace"));
  const std::size_t period = static_cast<std::size_t>(options.integer("period"));

  pool::PoolConfig config = pool::PoolConfig::from_options(config::options());
  config.device_limit = {options.size("limit"), 0, false};
  config.headroom = 0;
  config.spill = true;
  config.host_limit = {std::uint64_t{64} << 30, 0, false};
  auto pool = std::make_unique<pool::Pool>(drv(), config);
  pool->stop_background();  // the reserve's thread pins on its own schedule: the replay would vary
  CUstream stream = nullptr;
  check(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  std::unordered_map<std::uint64_t, CUdeviceptr> live;
  std::vector<CUdeviceptr> placed;
  for (const Op& op : ops) {
    if (op.alloc) {
      CUdeviceptr p = 0;
      check(pool->allocate_async(&p, op.bytes, stream), "allocate_async");
      live[op.id] = p;
      placed.push_back(p);
      if (placed.size() % period == 0) check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");  // the loss, read
    } else if (const auto it = live.find(op.id); it != live.end()) {
      CUresult r = CUDA_SUCCESS;
      pool->deallocate_async(it->second, stream, &r);
      check(r, "deallocate_async");
      live.erase(it);
    }
  }
  const pool::DeviceStats s = pool->stats(0);
  std::printf("\n%zu allocations, %zu a step, device limit %s (UVMPOOL_REPEAT_PLACES=%d); spilled %llu\n", placed.size(),
              period, options.text("limit").c_str(), config.repeat_places ? 1 : 0,
              static_cast<unsigned long long>(s.spilled_allocations));
  std::size_t last = 0, last_of = 0;
  for (std::size_t from = period; from + period <= placed.size(); from += period) {
    std::size_t same = 0;
    for (std::size_t i = from; i < from + period; ++i) same += placed[i] == placed[i - period] ? 1 : 0;
    std::printf("  step %zu: %zu of %zu at the address of the step before\n", from / period + 1, same, period);
    last = same;
    last_of = period;
  }
  std::printf("  stream-ordered allocations at their point's last place %llu, placed elsewhere %llu\n",
              static_cast<unsigned long long>(s.repeat_places_kept), static_cast<unsigned long long>(s.repeat_places_missed));
  if (last_of != 0)
    summary_line("places", "last step " + std::to_string(last) + " of " + std::to_string(last_of) +
                               " allocations at the address of the step before (" +
                               fixed(100.0 * static_cast<double>(last) / static_cast<double>(last_of), 1) + "%)");
  for (const auto& [id, p] : live) {
    CUresult r = CUDA_SUCCESS;
    pool->deallocate_async(p, stream, &r);
  }
  check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
  check(drv().cuStreamDestroy_v2(stream), "cuStreamDestroy");
  return 0;
}
