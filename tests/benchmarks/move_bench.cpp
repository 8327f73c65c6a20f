// uvmpool-bench-move: what moving memory between the tiers at the same address costs (pool v2's move
// operation, src/pool/move.cpp), against the copy engine's own rate.
//
// A live allocation of --bytes (1 GiB) is demoted to pinned host memory and promoted back, in units
// of --unit bytes (default: one extent), each direction as one batch: every unit prepared (target
// pieces taken, mapped at a staging address), all copies enqueued on one stream and waited for,
// every unit committed (old pieces unmapped, new ones mapped at the address, access set). Each phase
// is timed apart, so the driver calls' share shows beside the copy's.
//
// The baseline, in the same process: the same bytes copied with cuMemcpyDtoHAsync / HtoDAsync between
// a cuMemAlloc buffer and cuMemAllocHost memory (the copy engine's rate over PCIe), and the copy
// phase alone says whether copies between VMM ranges of the two tiers reach it. The host reserve is
// filled first, so pinning is not timed (it is a one-off cost of the host tier, 0.7 ms per 2 MiB on
// the H200 we measured). On the simulated driver the figures are modeled (the virtual clock's
// H200-calibrated costs, docs/simulator.md); on a GPU they are measured.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "config/options.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;
using Clock = std::chrono::steady_clock;

namespace {

// Seconds by the clock that means something here: modeled on the simulator, wall on a GPU.
struct Stopwatch {
  bool modeled;
  double start_modeled = 0;
  Clock::time_point start_wall;
  explicit Stopwatch(bool simulated) : modeled(simulated) { restart(); }
  void restart() {
    if (modeled) start_modeled = modeled_now();
    start_wall = Clock::now();
  }
  double seconds() const {
    return modeled ? modeled_now() - start_modeled : std::chrono::duration<double>(Clock::now() - start_wall).count();
  }
};

struct Phases {
  double prepare = 0, copy = 0, commit = 0;
  double total() const { return prepare + copy + commit; }
};

Phases move_all(pool::Pool& pool, CUdeviceptr p, std::uint64_t bytes, std::uint64_t unit, pool::Tier to,
                CUstream stream, bool simulated) {
  Phases t;
  std::vector<pool::Move> moves(bytes / unit);
  Stopwatch w(simulated);
  for (std::size_t i = 0; i < moves.size(); ++i) check(pool.prepare_move(p + i * unit, unit, to, &moves[i]), "prepare_move");
  t.prepare = w.seconds();
  w.restart();
  for (pool::Move& m : moves) check(pool.copy_move(m, stream), "copy_move");
  check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
  t.copy = w.seconds();
  w.restart();
  for (pool::Move& m : moves) check(pool.commit_move(&m), "commit_move");
  t.commit = w.seconds();
  return t;
}

double plain_copy(CUdeviceptr device, void* host, std::uint64_t bytes, bool to_host, CUstream stream, bool simulated) {
  Stopwatch w(simulated);
  check(to_host ? drv().cuMemcpyDtoHAsync_v2(host, device, bytes, stream) : drv().cuMemcpyHtoDAsync_v2(device, host, bytes, stream),
        "plain copy");
  check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
  return w.seconds();
}

std::string rate(std::uint64_t bytes, double seconds) { return fixed(static_cast<double>(bytes) / seconds / 1e9, 1) + " GB/s"; }

}  // namespace

int main(int argc, char** argv) {
  Options options("uvmpool-bench-move", "Moving a live allocation between the tiers at its address, against plain copies.");
  options.add("bytes", "1G", "the allocation moved");
  options.add("unit", "extent", "bytes per move (extent: UVMPOOL_EXTENT_SIZE)");
  options.add("reps", "3", "round trips; the median of each phase is reported");
  options.parse(&argc, argv);
  const Device dev = open_device();
  print_header("uvmpool-bench-move", dev);

  pool::PoolConfig config = pool::PoolConfig::from_options(config::options());
  config.spill = true;
  config.carve_max = 0;  // carved memory does not move (docs/architecture.md, "Carving")
  const std::uint64_t unit = options.text("unit") == "extent" ? config.extent_size : options.size("unit");
  const std::uint64_t bytes = options.size("bytes") / unit * unit;
  if (bytes == 0 || unit % dev.granularity != 0) {
    std::fprintf(stderr, "--bytes must hold a --unit, and --unit be a multiple of %llu\n",
                 static_cast<unsigned long long>(dev.granularity));
    return 2;
  }
  // A move takes whole pieces: units smaller than an extent need an allocation of units.
  if (unit < config.extent_size) config.extent_size = unit >= 2 * dev.granularity ? unit : 0;
  config.host_reserve = bytes;  // every host chunk pinned before the clock starts
  pool::Pool pool(drv(), config);
  CUstream stream = nullptr;
  check(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr p = 0;
  check(pool.allocate(&p, bytes), "Pool::allocate");
  check(drv().cuMemsetD8_v2(p, 0x5a, bytes), "cuMemsetD8");
  check(pool.fill_host_reserve(dev.device, bytes), "Pool::fill_host_reserve");

  std::vector<double> down_prepare, down_copy, down_commit, up_prepare, up_copy, up_commit, plain_down, plain_up;
  CUdeviceptr buffer = 0;
  void* host = nullptr;
  check(drv().cuMemAlloc_v2(&buffer, bytes), "cuMemAlloc");
  check(drv().cuMemAllocHost_v2(&host, bytes), "cuMemAllocHost");
  for (std::int64_t r = 0; r < options.integer("reps"); ++r) {
    const Phases down = move_all(pool, p, bytes, unit, pool::Tier::Host, stream, dev.simulated);
    const Phases up = move_all(pool, p, bytes, unit, pool::Tier::Device, stream, dev.simulated);
    down_prepare.push_back(down.prepare), down_copy.push_back(down.copy), down_commit.push_back(down.commit);
    up_prepare.push_back(up.prepare), up_copy.push_back(up.copy), up_commit.push_back(up.commit);
    plain_down.push_back(plain_copy(buffer, host, bytes, true, stream, dev.simulated));
    plain_up.push_back(plain_copy(buffer, host, bytes, false, stream, dev.simulated));
  }
  // The bytes survived every trip (a wrong remap would show here).
  std::vector<unsigned char> check_bytes(dev.granularity);
  for (std::uint64_t at = 0; at < bytes; at += unit) {
    check(drv().cuMemcpyDtoH_v2(check_bytes.data(), p + at, check_bytes.size()), "cuMemcpyDtoH");
    for (unsigned char c : check_bytes) {
      if (c != 0x5a) {
        std::fprintf(stderr, "the bytes at offset %llu changed across the moves\n", static_cast<unsigned long long>(at));
        return 1;
      }
    }
  }
  const pool::DeviceStats s = pool.stats(dev.device);
  drv().cuMemFreeHost(host);
  drv().cuMemFree_v2(buffer);
  CUresult result = CUDA_SUCCESS;
  pool.deallocate(p, &result);

  const double dp = median(down_prepare), dc = median(down_copy), dm = median(down_commit);
  const double up_p = median(up_prepare), uc = median(up_copy), um = median(up_commit);
  const double pd = median(plain_down), pu = median(plain_up);
  const std::string label = dev.simulated ? " (modeled)" : " (measured)";
  Figures f("Moving " + format_size(bytes) + " between the tiers in units of " + format_size(unit) + label);
  f.row("to host: prepare / copy / commit", format_seconds(dp) + " / " + format_seconds(dc) + " / " + format_seconds(dm));
  f.row("to host: moved at", rate(bytes, dp + dc + dm));
  f.row("to device: prepare / copy / commit", format_seconds(up_p) + " / " + format_seconds(uc) + " / " + format_seconds(um));
  f.row("to device: moved at", rate(bytes, up_p + uc + um));
  f.row("plain copy to host / to device (cuMemAllocHost)", rate(bytes, pd) + " / " + rate(bytes, pu));
  f.row("copy phase / plain copy, to host", fixed(dc / pd, 2), "about 1: VMM ranges of both tiers reach the copy engine's rate");
  f.row("copy phase / plain copy, to device", fixed(uc / pu, 2));
  f.row("whole move / plain copy, to host", fixed((dp + dc + dm) / pd, 2));
  f.row("whole move / plain copy, to device", fixed((up_p + uc + um) / pu, 2));
  f.row("driver calls per move (prepare + commit), to host / to device",
        format_seconds((dp + dm) / static_cast<double>(bytes / unit)) + " / " +
            format_seconds((up_p + um) / static_cast<double>(bytes / unit)));
  f.note("moves committed " + std::to_string(s.moves) + ", refused " + std::to_string(s.moves_failed) + "; bytes checked after every trip");
  f.print();
  summary_line("move", format_size(unit) + " units" + label + ": to host " + rate(bytes, dp + dc + dm) + " (plain copy " +
                           rate(bytes, pd) + "), to device " + rate(bytes, up_p + uc + um) + " (plain copy " + rate(bytes, pu) + ")");
  return 0;
}
