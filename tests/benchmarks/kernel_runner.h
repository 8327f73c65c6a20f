// The bandwidth kernels (kernels/bandwidth.cu, committed as PTX) loaded on one device and timed with
// CUDA events on a stream of their own: what the benchmarks that launch kernels share. The module and
// launch functions are reached by name (driver::real_symbol): the driver table lists only what
// uvmpool hooks or calls.
#pragma once

#include <cstdint>

#include "bench_common.h"

namespace uvmpool::bench {

class KernelRunner {
 public:
  // False where no kernel can run (the simulated driver, or a driver without the module calls).
  bool open(const Device& device);
  bool ready() const { return read_ != nullptr; }

  // One launch over `bytes` (a multiple of 16) at `data`, timed with events: seconds.
  double read_once(CUdeviceptr data, std::uint64_t bytes);
  double write_once(CUdeviceptr data, std::uint64_t bytes, unsigned value = 0x5a5a5a5au);
  // The median of `reps` launches after an untimed one (which also warms the GPU's translations).
  double read_seconds(CUdeviceptr data, std::uint64_t bytes, int reps);
  double write_seconds(CUdeviceptr data, std::uint64_t bytes, int reps);

 private:
  using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**);
  using ElapsedTime = CUresult (*)(float*, CUevent, CUevent);
  double timed(CUfunction kernel, void** args, const char* what);

  LaunchKernel launch_ = nullptr;
  ElapsedTime elapsed_ = nullptr;  // cuEventElapsedTime_v2, or v1 on drivers before 12.8
  CUfunction read_ = nullptr, write_ = nullptr;
  unsigned grid_ = 0, block_ = 256;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr, stop_ = nullptr;
  CUdeviceptr sink_ = 0;
};

}  // namespace uvmpool::bench
