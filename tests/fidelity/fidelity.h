// Shared fixture of the driver fidelity suite. Every test body runs unchanged against the simulated
// driver (CI) and against NVIDIA's driver (H100/H200), so each assertion states what the REAL
// driver answers; a test that passes on the GPU and fails on the simulator is a simulator bug.
//
// Where cuda.h is silent or wrong, the expected answers were measured on an NVIDIA H200 with driver
// 580.159.04 (CUDA 13.0) and say so ("Measured"); assertions marked "best belief" were not measured.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "driver/real_driver.h"

namespace fidelity {

using uvmpool::driver::Table;

// The driver under test (only valid inside a test that was not skipped).
const Table& drv();

// "CUDA_ERROR_INVALID_VALUE (1)", as the driver under test names it (number only if it cannot).
std::string cu_name(CUresult r);

// Predicate formatter: expected == got, both printed by name.
::testing::AssertionResult cu_equal(const char* expected_expr, const char* call_expr,
                                    CUresult expected, CUresult got);

// Calls a table entry; a missing entry (the driver does not export it) fails the test and answers
// CUDA_ERROR_UNKNOWN instead of crashing.
template <typename... P, typename... A>
CUresult call(CUresult (*fn)(P...), const char* name, A&&... args) {
  if (fn == nullptr) {
    ADD_FAILURE() << "the driver under test does not export " << name;
    return CUDA_ERROR_UNKNOWN;
  }
  return fn(std::forward<A>(args)...);
}

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
inline bool is_power_of_two(std::size_t n) { return n != 0 && (n & (n - 1)) == 0; }

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Properties of a pinned allocation at a location (device 0, a host NUMA node, the host).
CUmemAllocationProp pinned_prop(CUmemLocationType type, int id);
CUmemAccessDesc access_desc(CUmemLocationType type, int id,
                            CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

// One process-wide driver session: opened once, primary context of device 0 retained once
// (released when the test program ends).
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Every allocation below is remembered and released by TearDown (the GPU is shared: nothing may
  // be left behind). The explicit release functions forget what they released successfully.
  CUresult mem_alloc(CUdeviceptr* p, std::size_t bytes);
  CUresult mem_free(CUdeviceptr p);
  CUresult mem_create(CUmemGenericAllocationHandle* h, std::size_t bytes,
                      const CUmemAllocationProp& prop);
  CUresult mem_release(CUmemGenericAllocationHandle h);
  void track_handle(CUmemGenericAllocationHandle h);  // a reference taken some other way
  CUresult address_reserve(CUdeviceptr* p, std::size_t bytes, std::size_t alignment = 0);
  CUresult address_free(CUdeviceptr p, std::size_t bytes);
  CUresult mem_map(CUdeviceptr p, std::size_t bytes, CUmemGenericAllocationHandle h);
  CUresult mem_unmap(CUdeviceptr p, std::size_t bytes);
  CUresult host_alloc(void** p, std::size_t bytes, unsigned flags);

  // Reserve + create on device 0 + map + read/write access for device 0, in one step.
  CUresult vmm_device(CUdeviceptr* p, CUmemGenericAllocationHandle* h, std::size_t bytes);
  // The same on the host NUMA node 0 (what uvmpool's host tier maps), its minimum granularity
  // (`*bytes`), device access only.
  CUresult vmm_host(CUdeviceptr* p, CUmemGenericAllocationHandle* h, std::size_t* bytes);
  CUresult grant_device(CUdeviceptr p, std::size_t bytes);

  // Copies through the driver: what the device sees.
  std::vector<std::uint32_t> read_words(CUdeviceptr p, std::size_t count);
  CUresult write_words(CUdeviceptr p, const std::vector<std::uint32_t>& words);
  static std::vector<std::uint32_t> pattern(std::size_t count, std::uint32_t seed);

  // cuMemGetInfo_v2's free bytes (0 on failure, which also fails the test).
  std::size_t free_bytes();

  const Table& d = drv();
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::size_t gran = 0;   // minimum granularity of pinned device-0 memory
  std::size_t total = 0;  // cuDeviceTotalMem_v2 of device 0

 private:
  struct Range {
    CUdeviceptr p;
    std::size_t bytes;
  };
  std::vector<CUdeviceptr> allocs_;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<Range> reservations_;
  std::vector<Range> mappings_;
  std::vector<void*> host_;
};

// Makes no context current for a scope, and restores the previous one however the scope ends.
class NoCurrentContext {
 public:
  NoCurrentContext();
  ~NoCurrentContext();
  CUresult result() const { return result_; }

 private:
  CUcontext saved_ = nullptr;
  CUresult result_ = CUDA_SUCCESS;
};

}  // namespace fidelity

// Calls the driver under test by versioned symbol: CU(cuMemAlloc_v2, &p, bytes).
#define CU(fn, ...) ::fidelity::call(::fidelity::drv().fn, #fn __VA_OPT__(, ) __VA_ARGS__)

#define ASSERT_CU(expr) ASSERT_PRED_FORMAT2(::fidelity::cu_equal, CUDA_SUCCESS, expr)
#define EXPECT_CU(expr) EXPECT_PRED_FORMAT2(::fidelity::cu_equal, CUDA_SUCCESS, expr)
#define ASSERT_CU_EQ(expected, expr) ASSERT_PRED_FORMAT2(::fidelity::cu_equal, expected, expr)
#define EXPECT_CU_EQ(expected, expr) EXPECT_PRED_FORMAT2(::fidelity::cu_equal, expected, expr)
