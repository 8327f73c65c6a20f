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

}  // namespace simtest

#define ASSERT_CU(expr) ASSERT_EQ("CUDA_SUCCESS", ::simtest::cu_name(expr))
#define EXPECT_CU(expr) EXPECT_EQ("CUDA_SUCCESS", ::simtest::cu_name(expr))
#define ASSERT_CU_EQ(expected, expr) ASSERT_EQ(::simtest::cu_name(expected), ::simtest::cu_name(expr))
#define EXPECT_CU_EQ(expected, expr) EXPECT_EQ(::simtest::cu_name(expected), ::simtest::cu_name(expr))
