// Shared helpers of the simulated driver's tests: CUresult assertions that print names, the
// settings the main suite runs with, and a fixture with device 0's primary context current.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/sim_control.h"

namespace simtest {

constexpr std::size_t kMiB = std::size_t{1} << 20;
// What sim_test_main.cpp configures.
constexpr std::size_t kDeviceMemory = 256 * kMiB;
constexpr std::size_t kHostMemory = 64 * kMiB;
constexpr std::size_t kGranularity = 2 * kMiB;
// The cost model sim_test_main.cpp pins (rates in GB/s, which are bytes per ns; times in ns).
constexpr double kHbmRead = 1000, kHbmWrite = 500, kHostRead = 50, kHostWrite = 25, kCopy = 40, kPageable = 10;
constexpr std::uint64_t kLaunchNs = 2000, kKernelNs = 3000, kCopyNs = 1000, kCallNs = 100, kHostFuncNs = 5000,
                        kWaitValueNs = 700;
// Mapping calls: per mapping, and per GiB of a host-located one (round figures: 8192000 ns a GiB is
// 16000 ns for 2 MiB).
constexpr std::uint64_t kSetAccessDeviceNs = 30000, kSetAccessHostNs = 50000, kSetAccessHostNsPerGib = 8192000,
                        kUnmapDeviceNs = 17000, kUnmapHostNs = 30000, kUnmapHostNsPerGib = 2048000,
                        kReleaseDeviceNs = 12000, kReleaseHostNs = 8000, kReleaseHostNsPerGib = 16384000,
                        kSetAccessBesideCopyNs = 100000;  // the most a cuMemSetAccess waits for running copies

inline std::string cu_name(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

inline CUmemAllocationProp pinned_prop(CUmemLocationType type, int id) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  return prop;
}

inline CUmemAccessDesc access(CUmemLocationType type, int id,
                              CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
  CUmemAccessDesc desc{};
  desc.location.type = type;
  desc.location.id = id;
  desc.flags = flags;
  return desc;
}

// Reserve `bytes`, create a handle of that size at `prop`'s location, map it and grant device 0
// read-write access.
inline CUresult make_vmm(std::size_t bytes, const CUmemAllocationProp& prop, CUdeviceptr* va,
                         CUmemGenericAllocationHandle* handle) {
  CUresult r = cuMemAddressReserve(va, bytes, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = cuMemCreate(handle, bytes, &prop, 0);
  if (r == CUDA_SUCCESS) r = cuMemMap(*va, bytes, 0, *handle, 0);
  const CUmemAccessDesc rw = access(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  if (r == CUDA_SUCCESS) r = cuMemSetAccess(*va, bytes, &rw, 1);
  return r;
}

// Launches `f` on `stream` with one block and the given arguments (kernelParams form).
template <typename... Args>
CUresult launch(CUfunction f, CUstream stream, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

// Bytes at `gbps` GB/s, in ns, rounded as the simulator rounds.
inline std::uint64_t at(std::uint64_t bytes, double gbps) {
  return static_cast<std::uint64_t>(static_cast<double>(bytes) / gbps + 0.5);
}

// The virtual time between two completed events, in ns.
inline std::uint64_t elapsed_ns(CUevent a, CUevent b) {
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  return static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6 + 0.5);
}

// cuMemGetInfo_v2's free bytes of the current context's device.
inline std::size_t free_bytes() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  return free;
}

// cuInit, then device 0's primary context retained and current; released after the test, which
// frees what the test allocated in it.
class SimTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  CUcontext ctx = nullptr;
};

// A kernel of the simulator's catalog (sim_control.h), from a module loaded per test.
class KernelTest : public SimTest {
 protected:
  void SetUp() override;
  CUfunction kernel(const char* name);
  CUmodule module = nullptr;
};

}  // namespace simtest

#define ASSERT_CU(expr) ASSERT_EQ("CUDA_SUCCESS", ::simtest::cu_name(expr))
#define EXPECT_CU(expr) EXPECT_EQ("CUDA_SUCCESS", ::simtest::cu_name(expr))
#define ASSERT_CU_EQ(expected, expr) ASSERT_EQ(::simtest::cu_name(expected), ::simtest::cu_name(expr))
#define EXPECT_CU_EQ(expected, expr) EXPECT_EQ(::simtest::cu_name(expected), ::simtest::cu_name(expr))

namespace simtest {

// `count` 32-bit words read back from device memory at `p`.
inline std::vector<std::uint32_t> read_back(CUdeviceptr p, std::size_t count) {
  std::vector<std::uint32_t> out(count);
  EXPECT_CU(cuMemcpyDtoH(out.data(), p, count * sizeof(std::uint32_t)));
  return out;
}

}  // namespace simtest
