// The simulated driver's settings (UVMPOOL_SIM_* in uvmpool's option table), read once, on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uvmpool::sim {

// The cost model of the virtual clock (UVMPOOL_SIM_* rates in GB/s, which are bytes per ns, and
// durations in ns). docs/simulator.md says where each default was measured.
struct Costs {
  double hbm_read_gbps, hbm_write_gbps, host_read_gbps, host_write_gbps, copy_gbps, pageable_gbps;
  std::uint64_t launch_ns, kernel_ns, copy_ns, call_ns, query_ns, host_func_ns, wait_value_ns;
  std::uint64_t create_device_ns, create_device_ns_per_gib, create_host_ns_per_gib;
  std::uint64_t map_device_ns, map_host_ns;
  std::uint64_t set_access_device_ns, set_access_host_ns, set_access_ns_per_gib, set_access_host_ns_per_gib,
      set_access_beside_copy_ns;
  std::uint64_t unmap_device_ns, unmap_host_ns, unmap_host_ns_per_gib, release_device_ns, release_host_ns,
      release_host_ns_per_gib, release_ns_per_gib;
  std::uint64_t export_ns, import_ns;
  std::uint64_t alloc_ns, alloc_ns_per_gib, free_ns, free_ns_per_gib;
  std::uint64_t host_alloc_ns_per_gib, free_host_ns_per_gib;
  std::uint64_t hang_timeout_ms;
};

struct Settings {
  int devices = 1;                          // UVMPOOL_SIM_DEVICES
  std::uint64_t device_memory = 0;          // UVMPOOL_SIM_DEVICE_MEMORY, capacity of each device
  std::uint64_t host_memory = 0;            // UVMPOOL_SIM_HOST_MEMORY, pinned + host-located VMM
  std::uint64_t granularity = 2ull << 20;   // UVMPOOL_SIM_GRANULARITY, VMM granularity
  std::string fail;                         // UVMPOOL_SIM_FAIL
  Costs costs{};
};

// Read from the environment on first use (the first driver call), with invalid values replaced by
// the defaults and a warning logged.
const Settings& settings();

// The host page size.
std::size_t page_size();

inline constexpr int kMaxDevices = 16;

}  // namespace uvmpool::sim
