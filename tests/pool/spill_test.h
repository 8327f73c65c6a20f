// Shared fixture of the spill tests (spill_*_test.cpp): one simulated device of 256 MiB and 1 GiB of
// pinned host memory (UVMPOOL_SIM_HOST_MEMORY=1G), chunks of 2 MiB. The simulator charges the
// context 2 MiB of the device, so a budget of B leaves the pool B - 2 MiB of device chunks; the rest
// of an allocation goes to host chunks.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "pool_test.h"

namespace pooltest {

class SpillTest : public PoolTest {
 protected:
  static constexpr std::size_t kHostMemory = 1024 * kMiB;  // UVMPOOL_SIM_HOST_MEMORY

  void SetUp() override {
    PoolTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(total, 256 * kMiB) << "run under UVMPOOL_SIM_DEVICE_MEMORY=256M (as CTest does)";
    ASSERT_EQ(gran, 2 * kMiB);
    used_at_start = total - free_at_start;
    ASSERT_EQ(used_at_start, 2 * kMiB) << "the context's own memory; something else uses the device";
    ASSERT_TRUE(host_memory_whole()) << "something already holds pinned host memory";
  }

  // Device chunks a budget leaves the pool once the context's memory is counted.
  std::size_t device_chunks(std::size_t budget) const { return (budget - used_at_start) / gran; }
  std::size_t room(std::size_t budget) const { return budget - used_at_start; }

  // Where each chunk-sized piece of [p, p + bytes) lies, as the driver says: "D" device 0, "H" host,
  // "?" anything else (unmapped, another device). A mixed allocation of 3 device and 2 host chunks
  // reads "DDDHH".
  static std::string tiers(CUdeviceptr p, std::size_t bytes, std::size_t chunk) {
    std::string out;
    for (CUdeviceptr at = p / chunk * chunk; at < p + bytes; at += chunk) out += tier_at(at);
    return out;
  }
  static char tier_at(CUdeviceptr at) {
    CUmemGenericAllocationHandle h = 0;
    if (drv().cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(at)) != CUDA_SUCCESS) return '?';
    CUmemAllocationProp prop{};
    const CUresult r = drv().cuMemGetAllocationPropertiesFromHandle(&prop, h);
    drv().cuMemRelease(h);
    return r != CUDA_SUCCESS ? '?' : location_tier(prop.location);
  }
  static char location_tier(const CUmemLocation& l) {
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE) return l.id == 0 ? 'D' : '?';
    if (l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) return 'H';
    return '?';
  }
  static std::string layout(std::size_t device, std::size_t host) {
    return std::string(device, 'D') + std::string(host, 'H');
  }

  // Nothing holds pinned host memory: the simulator lends all of it to one host-located handle (a
  // leaked host chunk, mapping or external handle makes this fail).
  static ::testing::AssertionResult host_memory_whole() {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = drv().cuMemCreate(&h, kHostMemory, &prop, 0);
    if (r != CUDA_SUCCESS)
      return ::testing::AssertionFailure() << "a host-located cuMemCreate of all " << (kHostMemory >> 20)
                                           << " MiB answered " << cu_name(r) << ": pinned host memory is held";
    drv().cuMemRelease(h);
    return ::testing::AssertionSuccess();
  }

  // Polls `done` every few milliseconds for up to `seconds` (the reserve's background thread works
  // on its own schedule; a fixed sleep would be either slow or flaky).
  static bool eventually(const std::function<bool()>& done, double seconds = 5.0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  // The stats agree with the live allocations (each a Block) and with each other. With the reserve
  // thread running, host chunks move between the reserve and mappings while the figures are read,
  // so their sum is only checked when `quiet` (the thread stopped).
  void expect_consistent(Pool& pool, const std::vector<Block>& live, const std::string& when, bool quiet = false) {
    const DeviceStats s = pool.stats(0);
    std::size_t sum = 0;
    for (const Block& b : live) sum += b.bytes;
    EXPECT_EQ(s.live_allocations, live.size()) << when;
    EXPECT_EQ(s.live_bytes, sum) << when;
    EXPECT_LE(s.live_host_bytes, s.live_bytes) << when;
    EXPECT_LE(s.live_host_bytes, s.host_chunks_mapped * s.chunk_size) << when;
    if (quiet) {
      EXPECT_EQ(s.host_chunks_held, s.host_chunks_reserve + s.host_chunks_mapped) << when;
    }
    EXPECT_LE(s.host_chunks_held * s.chunk_size, s.host_limit) << when;
    EXPECT_LE(s.chunks_held * s.chunk_size + used_at_start, s.budget) << when;
    EXPECT_EQ(pool.check_invariants(), "") << when;
  }

  std::size_t used_at_start = 0;  // the context's device memory: others' use, for the budget
};

}  // namespace pooltest
