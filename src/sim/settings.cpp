#include "sim/settings.h"

#include <unistd.h>

#include "config/log.h"
#include "config/options.h"

namespace uvmpool::sim {
namespace {

bool is_power_of_two(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// config/ validates these already; the checks here only keep the sim sane whatever it is given.
Settings read_settings() {
  log::set_component("uvmpool-sim");
  const config::Options& options = config::options();
  Settings s;
  if (options.sim_devices < 0 || options.sim_devices > kMaxDevices) {
    log::warn("UVMPOOL_SIM_DEVICES={} is outside 0..{}; simulating 1 device", options.sim_devices,
              kMaxDevices);
  } else {
    s.devices = static_cast<int>(options.sim_devices);
  }
  s.device_memory = options.sim_device_memory.bytes;
  s.host_memory = options.sim_host_memory.bytes;
  const std::uint64_t granularity = options.sim_granularity.bytes;
  if (!is_power_of_two(granularity) || granularity < page_size()) {
    log::warn("UVMPOOL_SIM_GRANULARITY={} is not a power of two of at least the page size ({}); using {}",
              granularity, page_size(), s.granularity);
  } else {
    s.granularity = granularity;
  }
  s.fail = options.sim_fail;
  return s;
}

}  // namespace

const Settings& settings() {
  static const Settings* const instance = new Settings(read_settings());  // never destroyed
  return *instance;
}

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace uvmpool::sim
