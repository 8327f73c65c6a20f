// uvmpool-sim-calibrate: one fixed mix of kernels, copies and mapping calls, run on whatever driver
// uvmpool::driver::real() opens (a GPU's, or the simulated build/sim/libcuda.so.1 through
// UVMPOOL_DRIVER_PATH), printed as one JSON line per item and a table last. Run on both, the two
// outputs give the simulator's modeled times beside the GPU's measured ones, item by item
// (scripts/sim-calibration-compare.py). Work on a stream is timed with events on both drivers (the
// simulator answers cuEventElapsedTime in virtual time); host-side call costs with steady_clock on a
// GPU and with uvmpool_sim_now_ns (the calling thread's virtual clock) on the simulator.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "driver/real_driver.h"
#include "kernels/catalog_ptx.h"
#include "sim/sim_control.h"

namespace uvmpool::bench {
namespace {

using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
using ElapsedTime = CUresult (*)(float*, CUevent, CUevent);
using ModuleLoadData = CUresult (*)(CUmodule*, const void*);
using ModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using ModuleUnload = CUresult (*)(CUmodule);
using SimNow = std::uint64_t (*)();

// The driver's call of a symbol the table does not list; exits when it is missing.
template <typename Fn>
Fn symbol(const char* name) {
  auto fn = reinterpret_cast<Fn>(driver::real_symbol(name));
  if (fn == nullptr) {
    std::fprintf(stderr, "uvmpool-sim-calibrate: the driver has no %s\n", name);
    std::exit(1);
  }
  return fn;
}

const char* error_name(CUresult status) {
  const char* name = "unknown error";
  drv().cuGetErrorName(status, &name);
  return name;
}

struct Result {
  std::string item, timing;  // timing: "events" (work on a stream) or "host" (the calls' own cost)
  std::uint64_t bytes = 0, calls = 1;
  double ns = 0;
};

// Chunks at one location mapped one after another into one reserved range, device access set by one
// call over the whole range: how the pool maps a large allocation (and spills it to host chunks).
struct VmmRange {
  CUdeviceptr base = 0;
  std::uint64_t size = 0, chunk = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
};

// A rate only for work on a stream: the bytes a mapping call covers say nothing about speed.
bool rate(const Result& r) { return r.timing == "events" && r.bytes > 0 && r.ns > 0; }

class Calibration {
 public:
  Calibration(const Device& device, SimNow sim_now, std::uint64_t size, std::uint32_t passes, int reps, int calls);
  void run();
  void finish();  // frees everything and prints the table

 private:
  std::uint64_t now() const;
  // Runs `call` once, adds its host-side cost to *ns, exits naming `what` if it failed.
  template <typename Call>
  void host_timed(std::uint64_t* ns, const char* what, Call&& call);
  // Event-timed work on the stream: the median of `reps_` runs after an untimed one.
  template <typename Submit>
  double events_ns(Submit&& submit);
  void report(Result result);
  void touch(CUdeviceptr p, std::uint64_t bytes, std::uint32_t write, unsigned grid, unsigned block);

  CUmemLocation host_location() const { return {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}; }
  CUmemAllocationProp prop(CUmemLocation location) const;
  CUresult map_range(VmmRange* range, CUmemLocation location, std::uint64_t size);
  void free_range(VmmRange* range);

  void kernels();
  void launches();
  void copies();
  void mapping_calls(const std::string& tag, CUmemLocation location, std::uint64_t size, int count, int per_access);
  void set_access_beside_copies();
  void allocation_calls(const std::string& tag, std::uint64_t size);
  void stream_calls();

  const Device device_;
  const driver::Table& d_ = drv();
  const SimNow sim_now_;
  const std::uint64_t size_;
  const std::uint32_t passes_;
  const int reps_, calls_;
  LaunchKernel launch_ = nullptr;
  ElapsedTime elapsed_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction touch_ = nullptr;
  unsigned grid_ = 0;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr, stop_ = nullptr;
  CUdeviceptr device_alloc_ = 0;
  void* pinned_ = nullptr;
  VmmRange device_vmm_, host_vmm_;
  CUdeviceptr host_ = 0;           // device address of the host memory kernels touch in place
  void* host_fallback_ = nullptr;  // cuMemHostAlloc memory, where a host-located cuMemCreate failed
  std::vector<Result> results_;
};

Calibration::Calibration(const Device& device, SimNow sim_now, std::uint64_t size, std::uint32_t passes, int reps,
                         int calls)
    : device_(device), sim_now_(sim_now), size_(size), passes_(passes), reps_(reps), calls_(calls) {
  launch_ = symbol<LaunchKernel>("cuLaunchKernel");
  elapsed_ = d_.cuEventElapsedTime_v2 != nullptr ? d_.cuEventElapsedTime_v2 : symbol<ElapsedTime>("cuEventElapsedTime");
  // The simulator refuses PTX and the GPU refuses the simulator's image; each gets its own, with the
  // same kernels under the same names.
  const void* image = sim_now_ != nullptr ? static_cast<const void*>(UVMPOOL_SIM_MODULE_IMAGE)
                                          : static_cast<const void*>(kCatalogPtx);
  check(symbol<ModuleLoadData>("cuModuleLoadData")(&module_, image), "cuModuleLoadData");
  check(symbol<ModuleGetFunction>("cuModuleGetFunction")(&touch_, module_, "uvmpool_touch"),
        "cuModuleGetFunction(uvmpool_touch)");
  int sms = 0;
  check(d_.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_.device),
        "cuDeviceGetAttribute");
  grid_ = static_cast<unsigned>(sms) * 8;  // every SM full with 256-thread blocks, as KernelRunner
  check(d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d_.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d_.cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
}

std::uint64_t Calibration::now() const {
  if (sim_now_ != nullptr) return sim_now_();
  using std::chrono::steady_clock;
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now().time_since_epoch()).count());
}

template <typename Call>
void Calibration::host_timed(std::uint64_t* ns, const char* what, Call&& call) {
  const std::uint64_t start = now();
  const CUresult status = call();
  *ns += now() - start;
  check(status, what);
}

template <typename Submit>
double Calibration::events_ns(Submit&& submit) {
  std::vector<double> runs;
  for (int i = 0; i <= reps_; ++i) {
    check(d_.cuEventRecord(start_, stream_), "cuEventRecord");
    submit();
    check(d_.cuEventRecord(stop_, stream_), "cuEventRecord");
    check(d_.cuEventSynchronize(stop_), "cuEventSynchronize");
    float ms = 0;
    check(elapsed_(&ms, start_, stop_), "cuEventElapsedTime");
    if (i > 0) runs.push_back(static_cast<double>(ms) * 1e6);  // the first warms up (and maps pages in)
  }
  return median(runs);
}

void Calibration::report(Result r) {
  // Ordered, so each line starts with its item and driver (what the ctest and readers look for).
  nlohmann::ordered_json line = {{"item", r.item},   {"driver", sim_now_ != nullptr ? "sim" : "gpu"},
                                 {"bytes", r.bytes}, {"calls", r.calls},
                                 {"ns", r.ns},       {"ns_per_call", r.ns / static_cast<double>(r.calls)},
                                 {"gbps", nullptr},  {"timing", r.timing}};
  if (rate(r)) line["gbps"] = static_cast<double>(r.bytes) / r.ns;  // bytes per ns = GB/s
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  results_.push_back(std::move(r));
}

void Calibration::touch(CUdeviceptr p, std::uint64_t bytes, std::uint32_t write, unsigned grid, unsigned block) {
  std::uint32_t passes = passes_;
  void* args[] = {&p, &bytes, &passes, &write};
  check(launch_(touch_, grid, 1, 1, block, 1, 1, 0, stream_, args, nullptr), "cuLaunchKernel(uvmpool_touch)");
}

CUmemAllocationProp Calibration::prop(CUmemLocation location) const {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location = location;
  return p;
}

CUresult Calibration::map_range(VmmRange* range, CUmemLocation location, std::uint64_t size) {
  const CUmemAllocationProp p = prop(location);
  check(d_.cuMemGetAllocationGranularity(&range->chunk, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  range->size = (size + range->chunk - 1) / range->chunk * range->chunk;
  check(d_.cuMemAddressReserve(&range->base, range->size, range->chunk, 0, 0), "cuMemAddressReserve");
  for (std::uint64_t offset = 0; offset < range->size; offset += range->chunk) {
    CUmemGenericAllocationHandle handle = 0;
    if (const CUresult status = d_.cuMemCreate(&handle, range->chunk, &p, 0); status != CUDA_SUCCESS) {
      free_range(range);
      return status;
    }
    range->handles.push_back(handle);
    check(d_.cuMemMap(range->base + offset, range->chunk, 0, handle, 0), "cuMemMap");
  }
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device_.device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  check(d_.cuMemSetAccess(range->base, range->size, &access, 1), "cuMemSetAccess");
  return CUDA_SUCCESS;
}

void Calibration::free_range(VmmRange* range) {
  for (std::size_t i = 0; i < range->handles.size(); ++i) {
    check(d_.cuMemUnmap(range->base + i * range->chunk, range->chunk), "cuMemUnmap");
    check(d_.cuMemRelease(range->handles[i]), "cuMemRelease");
  }
  range->handles.clear();
  if (range->base != 0) check(d_.cuMemAddressFree(range->base, range->size), "cuMemAddressFree");
  range->base = 0;
}

void Calibration::run() {
  check(d_.cuMemAlloc_v2(&device_alloc_, size_), "cuMemAlloc");
  check(d_.cuMemHostAlloc(&pinned_, size_, 0), "cuMemHostAlloc");
  check(map_range(&device_vmm_, {CU_MEM_LOCATION_TYPE_DEVICE, device_.device}, size_), "cuMemCreate(device)");
  if (const CUresult status = map_range(&host_vmm_, host_location(), size_); status == CUDA_SUCCESS) {
    host_ = host_vmm_.base;
  } else {
    std::fprintf(stderr, "host-located cuMemCreate (HOST_NUMA 0) failed: %s; host items use cuMemHostAlloc DEVICEMAP\n",
                 error_name(status));
    check(d_.cuMemHostAlloc(&host_fallback_, size_, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc(DEVICEMAP)");
    check(d_.cuMemHostGetDevicePointer_v2(&host_, host_fallback_, 0), "cuMemHostGetDevicePointer");
  }
  kernels();
  launches();
  copies();
  const std::uint64_t chunk = device_.granularity;
  const CUmemLocation on_device{CU_MEM_LOCATION_TYPE_DEVICE, device_.device};
  mapping_calls("device_2m", on_device, chunk, calls_, 1);
  mapping_calls("device_32m", on_device, 16 * chunk, calls_, 1);
  mapping_calls("device_16x2m", on_device, chunk, 16 * calls_, 16);
  if (host_vmm_.base != 0) {
    mapping_calls("host_2m", host_location(), chunk, calls_, 1);
    mapping_calls("host_32m", host_location(), 16 * chunk, calls_, 1);  // host mappings cost per byte too
  }
  set_access_beside_copies();
  allocation_calls("2m", 2ull << 20);
  allocation_calls("64m", 64ull << 20);
  stream_calls();
}

void Calibration::kernels() {
  struct Target { const char* name; CUdeviceptr p; };
  const Target targets[] = {{"device_alloc", device_alloc_}, {"device_vmm", device_vmm_.base}, {"host", host_}};
  for (const Target& t : targets) {
    for (std::uint32_t write : {0u, 1u}) {
      const double ns = events_ns([&] { touch(t.p, size_, write, grid_, 256); });
      report({std::string(write ? "kernel_write_" : "kernel_read_") + t.name, "events", size_ * passes_, 1, ns});
    }
  }
}

// Launch latency: the host-side cost of one launch call, the event-measured time of one empty kernel,
// and of a run of them back to back (what a stream of small kernels costs each).
void Calibration::launches() {
  check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  std::uint64_t ns = 0;
  for (int i = 0; i < calls_; ++i)
    host_timed(&ns, "cuLaunchKernel(uvmpool_touch)", [&] {
      std::uint64_t bytes = 0;
      std::uint32_t passes = 1, write = 0;
      void* args[] = {&device_alloc_, &bytes, &passes, &write};
      return launch_(touch_, 1, 1, 1, 32, 1, 1, 0, stream_, args, nullptr);
    });
  check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  report({"launch_call", "host", 0, static_cast<std::uint64_t>(calls_), static_cast<double>(ns)});
  report({"launch_empty_kernel", "events", 0, 1, events_ns([&] { touch(device_alloc_, 0, 0, 1, 32); })});
  const double run = events_ns([&] {
    for (int i = 0; i < calls_; ++i) touch(device_alloc_, 0, 0, 1, 32);
  });
  report({"launch_empty_kernels_back_to_back", "events", 0, static_cast<std::uint64_t>(calls_), run});
}

void Calibration::copies() {
  auto copy = [&](const char* item, auto&& submit) { report({item, "events", size_, 1, events_ns(submit)}); };
  copy("copy_htod_pinned",
       [&] { check(d_.cuMemcpyHtoDAsync_v2(device_alloc_, pinned_, size_, stream_), "cuMemcpyHtoDAsync"); });
  copy("copy_dtoh_pinned",
       [&] { check(d_.cuMemcpyDtoHAsync_v2(pinned_, device_alloc_, size_, stream_), "cuMemcpyDtoHAsync"); });
  copy("copy_dtod", [&] {
    check(d_.cuMemcpyDtoDAsync_v2(device_vmm_.base, device_alloc_, size_, stream_), "cuMemcpyDtoDAsync");
  });
  copy("copy_host_to_device_vmm",
       [&] { check(d_.cuMemcpyAsync(device_vmm_.base, host_, size_, stream_), "cuMemcpyAsync(host to device)"); });
  copy("copy_device_vmm_to_host",
       [&] { check(d_.cuMemcpyAsync(host_, device_vmm_.base, size_, stream_), "cuMemcpyAsync(device to host)"); });
}

// `count` handles of `size` at `location`: cuMemCreate each, cuMemMap each into one reserved range,
// cuMemSetAccess over `per_access` consecutive mappings a call, cuMemUnmap and cuMemRelease each, every
// call timed on its own. With per_access > 1 only cuMemSetAccess is reported (the rest repeats the
// one-mapping run).
void Calibration::mapping_calls(const std::string& tag, CUmemLocation location, std::uint64_t size, int count,
                                int per_access) {
  check(d_.cuCtxSynchronize(), "cuCtxSynchronize");
  const CUmemAllocationProp p = prop(location);
  const std::uint64_t total = size * static_cast<std::uint64_t>(count);
  const std::uint64_t n = static_cast<std::uint64_t>(count);
  const bool all = per_access == 1;
  CUdeviceptr base = 0;
  check(d_.cuMemAddressReserve(&base, total, size, 0, 0), "cuMemAddressReserve");
  std::vector<CUmemGenericAllocationHandle> handles(n);
  std::uint64_t create = 0, map = 0, access = 0, unmap = 0, release = 0;
  for (auto& h : handles) host_timed(&create, "cuMemCreate", [&] { return d_.cuMemCreate(&h, size, &p, 0); });
  for (std::uint64_t i = 0; i < n; ++i)
    host_timed(&map, "cuMemMap", [&] { return d_.cuMemMap(base + i * size, size, 0, handles[i], 0); });
  const CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, device_.device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const std::uint64_t span = size * static_cast<std::uint64_t>(per_access);
  for (std::uint64_t offset = 0; offset < total; offset += span)
    host_timed(&access, "cuMemSetAccess", [&] { return d_.cuMemSetAccess(base + offset, span, &desc, 1); });
  for (std::uint64_t i = 0; i < n; ++i)
    host_timed(&unmap, "cuMemUnmap", [&] { return d_.cuMemUnmap(base + i * size, size); });
  for (auto h : handles) host_timed(&release, "cuMemRelease", [&] { return d_.cuMemRelease(h); });
  check(d_.cuMemAddressFree(base, total), "cuMemAddressFree");
  const auto r = [&](const char* call, std::uint64_t calls, std::uint64_t ns) {
    report({std::string("mem_") + call + "_" + tag, "host", total, calls, static_cast<double>(ns)});
  };
  if (all) {
    r("create", n, create);
    r("map", n, map);
  }
  r("set_access", n / static_cast<std::uint64_t>(per_access), access);
  if (all) {
    r("unmap", n, unmap);
    r("release", n, release);
  }
}

// cuMemSetAccess on fresh 2 MiB device mappings while copies run both ways on the copy engines: on an
// H200 each call waited about 1 ms (24 us alone; tests/gpu/remap_under_load.py --calls), which the
// simulator models with UVMPOOL_SIM_SET_ACCESS_BESIDE_COPY_NS. The copies are queued to outlast the
// calls (2 ms of link time a call, each way) and use buffers of their own direction each.
void Calibration::set_access_beside_copies() {
  check(d_.cuCtxSynchronize(), "cuCtxSynchronize");
  const std::uint64_t chunk = device_.granularity, n = static_cast<std::uint64_t>(calls_);
  const CUmemAllocationProp p = prop({CU_MEM_LOCATION_TYPE_DEVICE, device_.device});
  CUdeviceptr base = 0;
  check(d_.cuMemAddressReserve(&base, n * chunk, chunk, 0, 0), "cuMemAddressReserve");
  std::vector<CUmemGenericAllocationHandle> handles(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    check(d_.cuMemCreate(&handles[i], chunk, &p, 0), "cuMemCreate");
    check(d_.cuMemMap(base + i * chunk, chunk, 0, handles[i], 0), "cuMemMap");
  }
  CUstream out = nullptr;
  check(d_.cuStreamCreate(&out, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::uint64_t link_bytes = n * 2'000'000 * 55;  // 2 ms a call at about 55 GB/s
  const std::uint64_t copies = std::max<std::uint64_t>(1, (link_bytes + size_ - 1) / size_);
  for (std::uint64_t k = 0; k < copies; ++k) {
    check(d_.cuMemcpyHtoDAsync_v2(device_alloc_, pinned_, size_, stream_), "cuMemcpyHtoDAsync");
    check(d_.cuMemcpyAsync(host_, device_vmm_.base, size_, out), "cuMemcpyAsync(device to host)");
  }
  const CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, device_.device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  std::uint64_t access = 0;
  for (std::uint64_t i = 0; i < n; ++i)
    host_timed(&access, "cuMemSetAccess", [&] { return d_.cuMemSetAccess(base + i * chunk, chunk, &desc, 1); });
  check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  check(d_.cuStreamSynchronize(out), "cuStreamSynchronize");
  check(d_.cuStreamDestroy_v2(out), "cuStreamDestroy");
  for (std::uint64_t i = 0; i < n; ++i) check(d_.cuMemUnmap(base + i * chunk, chunk), "cuMemUnmap");
  for (auto h : handles) check(d_.cuMemRelease(h), "cuMemRelease");
  check(d_.cuMemAddressFree(base, n * chunk), "cuMemAddressFree");
  report({"mem_set_access_beside_copy", "host", n * chunk, n, static_cast<double>(access)});
}

void Calibration::allocation_calls(const std::string& tag, std::uint64_t size) {
  check(d_.cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<CUdeviceptr> pointers(static_cast<std::size_t>(calls_));
  std::uint64_t alloc = 0, frees = 0;
  for (auto& p : pointers) host_timed(&alloc, "cuMemAlloc", [&] { return d_.cuMemAlloc_v2(&p, size); });
  for (auto p : pointers) host_timed(&frees, "cuMemFree", [&] { return d_.cuMemFree_v2(p); });
  const std::uint64_t n = pointers.size();
  report({"mem_alloc_" + tag, "host", size * n, n, static_cast<double>(alloc)});
  report({"mem_free_" + tag, "host", size * n, n, static_cast<double>(frees)});
}

// Calls on an idle stream: recording an event, and asking whether the stream is done.
void Calibration::stream_calls() {
  check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  std::uint64_t record = 0, query = 0;
  for (int i = 0; i < calls_; ++i)
    host_timed(&record, "cuEventRecord", [&] { return d_.cuEventRecord(start_, stream_); });
  check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  for (int i = 0; i < calls_; ++i) host_timed(&query, "cuStreamQuery", [&] { return d_.cuStreamQuery(stream_); });
  const auto n = static_cast<std::uint64_t>(calls_);
  report({"event_record", "host", 0, n, static_cast<double>(record)});
  report({"stream_query", "host", 0, n, static_cast<double>(query)});
}

void Calibration::finish() {
  check(d_.cuCtxSynchronize(), "cuCtxSynchronize");
  free_range(&device_vmm_);
  free_range(&host_vmm_);
  if (host_fallback_ != nullptr) check(d_.cuMemFreeHost(host_fallback_), "cuMemFreeHost");
  check(d_.cuMemFreeHost(pinned_), "cuMemFreeHost");
  check(d_.cuMemFree_v2(device_alloc_), "cuMemFree");
  check(d_.cuEventDestroy_v2(start_), "cuEventDestroy");
  check(d_.cuEventDestroy_v2(stop_), "cuEventDestroy");
  check(d_.cuStreamDestroy_v2(stream_), "cuStreamDestroy");
  check(symbol<ModuleUnload>("cuModuleUnload")(module_), "cuModuleUnload");
  check(d_.cuDevicePrimaryCtxRelease_v2(device_.device), "cuDevicePrimaryCtxRelease");

  Figures table(std::string("uvmpool-sim-calibrate on ") + (sim_now_ != nullptr ? "the simulated driver" : "a GPU") +
                " (" + device_.name + ")");
  for (const Result& r : results_) {
    std::string value = format_seconds(r.ns / static_cast<double>(r.calls) / 1e9) + " per call (" + r.timing + ")";
    if (rate(r)) value += ", " + fixed(static_cast<double>(r.bytes) / r.ns, 1) + " GB/s";
    table.row(r.item, value);
  }
  table.note(std::to_string(results_.size()) + " items; " + format_size(size_) + " buffers, " +
             std::to_string(passes_) + " pass(es), median of " + std::to_string(reps_) + " event-timed runs, " +
             std::to_string(calls_) + " calls per call item");
  table.print();
}

// Removes a bare flag (Options takes only --name=value); true when it was there.
bool take_flag(int* argc, char** argv, const char* flag) {
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], flag) != 0) continue;
    for (int j = i; j + 1 < *argc; ++j) argv[j] = argv[j + 1];
    --*argc;
    return true;
  }
  return false;
}

}  // namespace
}  // namespace uvmpool::bench

int main(int argc, char** argv) {
  using namespace uvmpool::bench;
  const bool small = take_flag(&argc, argv, "--small");
  Options options("uvmpool-sim-calibrate",
                  "kernels, copies and mapping calls on the GPU or the simulated driver, one JSON line each "
                  "(--small: sizes for the simulator's tests)");
  options.add("size", small ? "64M" : "1G", "bytes of each kernel and copy item");
  options.add("passes", "1", "passes of each read or write kernel over its buffer");
  options.add("reps", small ? "3" : "5", "event-timed runs of each kernel and copy item (median, after one untimed)");
  options.add("calls", small ? "8" : "32", "calls of each mapping, allocation and stream call item (mean)");
  options.parse(&argc, argv);
  const std::uint64_t size = options.size("size");
  const std::int64_t passes = options.integer("passes"), reps = options.integer("reps");
  const std::int64_t calls = options.integer("calls");
  if (size % 16 != 0 || passes < 1 || passes > 1000 || reps < 1 || reps > 1000 || calls < 1 || calls > 4096) {
    std::fprintf(stderr, "uvmpool-sim-calibrate: --size: a multiple of 16; --passes, --reps: 1 to 1000; "
                         "--calls: 1 to 4096\n");
    return 2;
  }
  const Device device = open_device();
  // The simulator exports its control API beside the driver calls; a GPU's driver does not.
  const auto sim_now = reinterpret_cast<SimNow>(uvmpool::driver::real_symbol("uvmpool_sim_now_ns"));
  std::printf("# uvmpool-sim-calibrate on %s, driver %s (%s)\n", device.name.c_str(),
              uvmpool::driver::real()->path.c_str(), sim_now != nullptr ? "simulated: virtual time" : "GPU");
  Calibration calibration(device, sim_now, size, static_cast<std::uint32_t>(passes), static_cast<int>(reps),
                          static_cast<int>(calls));
  calibration.run();
  calibration.finish();
  return 0;
}
