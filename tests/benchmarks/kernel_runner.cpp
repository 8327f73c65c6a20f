#include "kernel_runner.h"

#include <vector>

#include "driver/real_driver.h"
#include "kernels/bandwidth_ptx.h"

namespace uvmpool::bench {

bool KernelRunner::open(const Device& device) {
  using ModuleLoadData = CUresult (*)(CUmodule*, const void*);
  using ModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
  auto load = reinterpret_cast<ModuleLoadData>(driver::real_symbol("cuModuleLoadData"));
  auto get = reinterpret_cast<ModuleGetFunction>(driver::real_symbol("cuModuleGetFunction"));
  launch_ = reinterpret_cast<LaunchKernel>(driver::real_symbol("cuLaunchKernel"));
  elapsed_ = drv().cuEventElapsedTime_v2 != nullptr
                 ? drv().cuEventElapsedTime_v2
                 : reinterpret_cast<ElapsedTime>(driver::real_symbol("cuEventElapsedTime"));
  if (device.simulated || load == nullptr || get == nullptr || launch_ == nullptr || elapsed_ == nullptr) return false;
  const driver::Table& d = drv();
  CUmodule module = nullptr;
  check(load(&module, kBandwidthPtx), "cuModuleLoadData");
  check(get(&read_, module, "read_bytes"), "cuModuleGetFunction(read_bytes)");
  check(get(&write_, module, "write_bytes"), "cuModuleGetFunction(write_bytes)");
  int sms = 0;
  check(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device.device), "cuDeviceGetAttribute");
  // Every SM full (8 blocks of 256 threads), 4 independent 16-byte accesses per thread per trip:
  // about 17 MB in flight, far beyond PCIe's bandwidth x latency (about 50 GB/s x 2 us = 100 KB).
  grid_ = static_cast<unsigned>(sms) * 8;
  check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuMemAlloc_v2(&sink_, 16), "cuMemAlloc(sink)");
  return true;
}

double KernelRunner::timed(CUfunction kernel, void** args, const char* what) {
  check(drv().cuEventRecord(start_, stream_), "cuEventRecord");
  check(launch_(kernel, grid_, 1, 1, block_, 1, 1, 0, stream_, args, nullptr), what);
  check(drv().cuEventRecord(stop_, stream_), "cuEventRecord");
  check(drv().cuEventSynchronize(stop_), "cuEventSynchronize");
  float ms = 0;
  check(elapsed_(&ms, start_, stop_), "cuEventElapsedTime");
  return ms / 1e3;
}

double KernelRunner::read_once(CUdeviceptr data, std::uint64_t bytes) {
  std::size_t words = bytes / 16;
  void* args[] = {&data, &words, &sink_};
  return timed(read_, args, "cuLaunchKernel(read_bytes)");
}

double KernelRunner::write_once(CUdeviceptr data, std::uint64_t bytes, unsigned value) {
  std::size_t words = bytes / 16;
  void* args[] = {&data, &words, &value};
  return timed(write_, args, "cuLaunchKernel(write_bytes)");
}

double KernelRunner::read_seconds(CUdeviceptr data, std::uint64_t bytes, int reps) {
  read_once(data, bytes);
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) s.push_back(read_once(data, bytes));
  return median(s);
}

double KernelRunner::write_seconds(CUdeviceptr data, std::uint64_t bytes, int reps) {
  write_once(data, bytes);
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) s.push_back(write_once(data, bytes));
  return median(s);
}

}  // namespace uvmpool::bench
