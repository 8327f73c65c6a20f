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
  const config::Options& o = options;
  s.costs = Costs{o.sim_hbm_read_gbps, o.sim_hbm_write_gbps, o.sim_host_read_gbps, o.sim_host_write_gbps,
                  o.sim_copy_gbps, o.sim_pageable_gbps,
                  o.sim_launch_ns.ns, o.sim_kernel_ns.ns, o.sim_copy_ns.ns, o.sim_call_ns.ns, o.sim_query_ns.ns,
                  o.sim_host_func_ns.ns, o.sim_wait_value_ns.ns,
                  o.sim_create_device_ns.ns, o.sim_create_device_ns_per_gib.ns, o.sim_create_host_ns_per_gib.ns,
                  o.sim_map_device_ns.ns, o.sim_map_host_ns.ns,
                  o.sim_set_access_device_ns.ns, o.sim_set_access_host_ns.ns, o.sim_set_access_ns_per_gib.ns,
                  o.sim_set_access_host_ns_per_gib.ns, o.sim_set_access_beside_copy_ns.ns,
                  o.sim_unmap_device_ns.ns, o.sim_unmap_host_ns.ns, o.sim_unmap_host_ns_per_gib.ns, o.sim_release_device_ns.ns,
                  o.sim_release_host_ns.ns, o.sim_release_host_ns_per_gib.ns, o.sim_release_ns_per_gib.ns,
                  o.sim_export_ns.ns, o.sim_import_ns.ns,
                  o.sim_alloc_ns.ns, o.sim_alloc_ns_per_gib.ns, o.sim_free_ns.ns, o.sim_free_ns_per_gib.ns,
                  o.sim_host_alloc_ns_per_gib.ns, o.sim_free_host_ns_per_gib.ns,
                  static_cast<std::uint64_t>(o.sim_hang_timeout_ms)};
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
