// uvmpool-bench-launch: what the launch hooks add to a kernel launch (src/tiering, docs/tiering.md).
//
// Measured, not modeled, on either driver: the hooks run on the CPU, so their cost is wall time even
// on the simulated driver (whose own launch costs something else than a GPU's: there the baseline is
// only a baseline). In one process, interleaved, medians of several batches:
//   - the driver's own cuLaunchKernel (the baseline);
//   - uvmpool's hook of it while nothing lies in host memory (the common case: issue 16's target is
//     at most 100 ns added);
//   - the hook while the kernel's argument points into host memory (arguments read, pointer probed),
//     against the driver's own launch measured again beside it;
//   - reading a PyTorch-sized argument buffer alone (512 bytes: 3 pool pointers among sizes and
//     strides, as an elementwise kernel's OffsetCalculator passes them), without launching.
// The process's pool spills past UVMPOOL_DEVICE_LIMIT, which this benchmark sets to 1G unless given.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_common.h"
#include "config/options.h"
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "kernels/catalog_ptx.h"
#include "pool/pool.h"
#include "tiering/tiering.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

// Nanoseconds per call of `body` (which makes `batch` calls): the median of `reps` batches, with
// `between` (untimed) after each.
template <typename Body, typename Between>
double ns_per_call(int batch, int reps, Body body, Between between) {
  std::vector<double> ns;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    between();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
  }
  return median(ns);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("UVMPOOL_DEVICE_LIMIT", "1G", 0);  // before the options are read
  Options options("uvmpool-bench-launch", "What the launch hooks add to a kernel launch (measured on the CPU).");
  options.add("launches", "2000", "launches per timed batch");
  options.add("reps", "15", "batches per case (interleaved); the median is reported");
  options.parse(&argc, argv);
  const Device dev = open_device();
  print_header("uvmpool-bench-launch", dev);
  const int batch = static_cast<int>(options.integer("launches"));
  const int reps = static_cast<int>(options.integer("reps"));

  // The catalog's fill kernel: the simulator's own image, or the committed PTX on a GPU.
  CUmodule module = nullptr;
  if (drv().cuModuleLoadData(&module, "uvmpool-sim-module 1\n") != CUDA_SUCCESS)
    check(drv().cuModuleLoadData(&module, kCatalogPtx), "cuModuleLoadData");
  CUfunction fill = nullptr;
  check(drv().cuModuleGetFunction(&fill, module, "uvmpool_fill_u32"), "cuModuleGetFunction");
  CUstream stream = nullptr;
  check(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // The process's pool (the one the hooks see), nothing in host memory yet.
  pool::Pool* pool = pool::Pool::process();
  if (pool == nullptr) {
    std::fprintf(stderr, "no pool\n");
    return 1;
  }
  CUdeviceptr on_device = 0;
  check(pool->allocate(&on_device, 4u << 20), "Pool::allocate");
  tiering::Tiering* tiering = tiering::Tiering::process();
  if (tiering == nullptr) {
    std::fprintf(stderr, "tiering is off (UVMPOOL_TIERING=off): nothing to measure\n");
    return 2;
  }
  std::uint64_t count = 0;  // the kernel does nothing: the launch is what is timed
  std::uint32_t value = 0;
  CUdeviceptr dst = on_device;
  void* params[] = {&dst, &count, &value};
  const auto launches = [&](bool hooked) {
    return [&, hooked] {
      for (int i = 0; i < batch; ++i) {
        const CUresult r = hooked ? hooks::impl::cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr)
                                  : drv().cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
        if (r != CUDA_SUCCESS) check(r, "cuLaunchKernel");
      }
    };
  };
  const auto drain = [&] { check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize"); };
  const auto nothing = [] {};

  // Interleaved rounds, so drift (clocks, other load) falls on every case alike.
  std::vector<double> bare, hooked_fits, bare_spilled, hooked_spilled, read_only;
  if (pool->any_host_mapped()) {
    std::fprintf(stderr, "host memory is mapped before anything spilled\n");
    return 1;
  }
  for (int r = 0; r < reps; ++r) {
    bare.push_back(ns_per_call(batch, 1, launches(false), drain));
    hooked_fits.push_back(ns_per_call(batch, 1, launches(true), drain));
  }
  // Now spill: an allocation past the 1G limit, the kernel pointed at its last chunk (host memory).
  const std::size_t spill_bytes = 1280u << 20;
  CUdeviceptr spilled = 0;
  check(pool->allocate(&spilled, spill_bytes), "Pool::allocate (past the limit)");
  dst = spilled + spill_bytes - (2u << 20);
  if (!pool->probe(dst).host) {
    std::fprintf(stderr, "the allocation past UVMPOOL_DEVICE_LIMIT did not spill\n");
    return 1;
  }
  // A PyTorch-sized argument buffer: 64 words, three of them pool pointers.
  std::vector<std::uint64_t> torch_args(64);
  for (std::size_t i = 0; i < torch_args.size(); ++i) torch_args[i] = i % 7 == 0 ? 1 : 1000 * i;
  torch_args[1] = spilled;
  torch_args[2] = on_device;
  torch_args[3] = dst;
  std::size_t torch_size = torch_args.size() * 8;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, torch_args.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &torch_size,
                   CU_LAUNCH_PARAM_END};
  for (int r = 0; r < reps; ++r) {
    bare_spilled.push_back(ns_per_call(batch, 1, launches(false), drain));  // its own baseline, interleaved
    hooked_spilled.push_back(ns_per_call(batch, 1, launches(true), drain));
    read_only.push_back(ns_per_call(batch * 10, 1, [&] {
      tiering::LaunchSeen seen;
      for (int i = 0; i < batch * 10; ++i) tiering->before_launch(fill, stream, nullptr, extra, &seen);
    }, nothing));
  }
  const tiering::Stats ts = tiering->stats();
  CUresult result = CUDA_SUCCESS;
  pool->deallocate(spilled, &result);
  pool->deallocate(on_device, &result);
  drv().cuStreamDestroy_v2(stream);
  drv().cuModuleUnload(module);

  const double b = median(bare), fits = median(hooked_fits), b2 = median(bare_spilled), sp = median(hooked_spilled),
               ro = median(read_only);
  Figures f(std::string("The launch hooks: nanoseconds per launch, measured on the CPU") +
            (dev.simulated ? " (simulated driver: its launch is the baseline, not a GPU's)" : ""));
  f.row("driver's cuLaunchKernel (baseline)", fixed(b, 0) + " ns");
  f.row("hooked, nothing in host memory", fixed(fits, 0) + " ns (+" + fixed(fits - b, 0) + ")", "+100 ns at most");
  f.row("driver's cuLaunchKernel, after the spill (baseline)", fixed(b2, 0) + " ns");
  f.row("hooked, argument in host memory", fixed(sp, 0) + " ns (+" + fixed(sp - b2, 0) + ")");
  f.row("reading 512 argument bytes (3 pool pointers), no launch", fixed(ro, 0) + " ns");
  f.note("Launches read: " + std::to_string(ts.launches_read) + ", pool pointers found: " + std::to_string(ts.pointers) +
         ", in host memory: " + std::to_string(ts.host_pointers) + ". " + std::to_string(batch) + " launches per batch, " +
         std::to_string(reps) + " batches per case, interleaved; medians.");
  f.print();
  summary_line("launch", "hook adds " + fixed(fits - b, 0) + " ns per launch with nothing spilled (target <= 100), " +
                             fixed(sp - b2, 0) + " ns with a spilled argument; 512-byte read " + fixed(ro, 0) + " ns");
  return 0;
}
