// The simulated driver's settings (UVMPOOL_SIM_* in uvmpool's option table), read once, on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uvmpool::sim {

struct Settings {
  int devices = 1;                          // UVMPOOL_SIM_DEVICES
  std::uint64_t device_memory = 0;          // UVMPOOL_SIM_DEVICE_MEMORY, capacity of each device
  std::uint64_t host_memory = 0;            // UVMPOOL_SIM_HOST_MEMORY, pinned + host-located VMM
  std::uint64_t granularity = 2ull << 20;   // UVMPOOL_SIM_GRANULARITY, VMM granularity
  std::string fail;                         // UVMPOOL_SIM_FAIL
};

// Read from the environment on first use (the first driver call), with invalid values replaced by
// the defaults and a warning logged.
const Settings& settings();

// The host page size.
std::size_t page_size();

inline constexpr int kMaxDevices = 16;

}  // namespace uvmpool::sim
