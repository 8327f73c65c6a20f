// The hand-made Report the format, reader and uvmpool-stat tests share: the figures of the example
// table in the statistics brief (one device that has spilled to host memory).
#pragma once

#include <cstdint>
#include <string>

#include "stats/report.h"

namespace uvmpool::stats::test {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

inline void add_process(Report& r, const std::string& name, std::uint64_t value, Kind kind = Kind::Counter,
                        Unit unit = Unit::Count, const std::string& label = "") {
  r.process_metrics.push_back({name, label, kind, unit, "The " + name + " of the process."});
  r.process_values.push_back(value);
}

// Adds a device metric with `value` for every device of `r`.
inline void add_device(Report& r, const std::string& name, std::uint64_t value, Kind kind = Kind::Gauge,
                       Unit unit = Unit::Bytes, const std::string& label = "") {
  r.device_metrics.push_back({name, label, kind, unit, "The " + name + " of the device."});
  for (DeviceValues& d : r.devices) d.values.push_back(value);
}

inline Report sample_report() {
  Report r;
  r.pid = 4242;
  r.command = "python train.py";
  r.version = "0.4.0";
  r.start_unix_s = 1700000000.0;
  r.updated_unix_s = 1700000012.3;
  add_process(r, "intercepted_allocations", 1300);
  add_process(r, "pool_allocations", 1290);
  add_process(r, "driver_allocations", 10);
  add_process(r, "intercepted_frees", 1250);
  add_process(r, "resolved_via_dlsym", 12);
  add_process(r, "resolved_via_getproc", 300);
  add_process(r, "calls_via_export", 0);
  const std::pair<const char*, std::uint64_t> calls[] = {
      {"cuMemAlloc_v2", 1000}, {"cuMemFree_v2", 990},       {"cuMemGetInfo_v2", 40},
      {"cuMemAllocAsync", 9},  {"cuMemFreeAsync", 9},       {"cuPointerGetAttribute", 7},
      {"cuMemCreate", 3},      {"cuMemGetAddressRange_v2", 5}, {"cuMemRelease", 2},
      {"cuGetProcAddress_v2", 0}};
  for (const auto& [function, n] : calls) {
    add_process(r, "hook_calls", n, Kind::Counter, Unit::Count, std::string("function=") + function);
  }
  add_process(r, "launches_read", 16383);
  add_process(r, "launches_in_place", 10318);
  add_process(r, "tiering_moves", 365);
  add_process(r, "tiering_epochs", 144);
  add_process(r, "tiering_promoted_bytes", 12 * kGiB, Kind::Counter, Unit::Bytes);
  add_process(r, "tiering_demoted_bytes", 14 * kGiB, Kind::Counter, Unit::Bytes);
  add_process(r, "tiering_moves_failed", 747);
  add_process(r, "tiering_period", 2285, Kind::Gauge, Unit::Count);
  add_process(r, "tiering_kept_in_place", 44);
  add_process(r, "tiering_holds_given_up", 0);
  add_process(r, "tiering_holds_broken", 0);
  add_process(r, "tiering_queue_waits", 0);
  add_process(r, "tiering_launches_ordered", 0);
  add_process(r, "tiering_ordered_on_host", 0);
  for (const char* now : {"tiering_mover_step", "tiering_mover_step_seconds", "tiering_holds_standing", "tiering_gate_closed",
                          "tiering_gate_waiting"}) {
    add_process(r, now, 0, Kind::Gauge, Unit::Count);  // idle: no "tiering now" line
  }
  const std::pair<const char*, std::uint64_t> mover_time[] = {{"preparing", 400}, {"closing_gate", 0},  {"draining", 2340000},
                                                              {"waiting_for_pool", 0}, {"copying", 810000}, {"remapping", 120000},
                                                              {"fencing", 0}};
  for (const auto& [step, us] : mover_time) {
    add_process(r, "tiering_mover_time", us, Kind::Counter, Unit::Microseconds, std::string("step=") + step);
  }
  add_process(r, "trace_events", 0);
  add_process(r, "trace_dropped", 0);

  r.devices.push_back(DeviceValues{0, {}});
  const std::uint64_t live_device = 3650722202;  // 3.4 GiB
  const std::uint64_t live_host = 8 * kGiB + kGiB / 2;
  add_device(r, "chunk_size", 2 * kMiB);
  add_device(r, "chunks_held", 1742, Kind::Gauge, Unit::Chunks);
  add_device(r, "held_bytes", 1742 * 2 * kMiB);
  add_device(r, "peak_held_bytes", 3 * kGiB + kGiB / 2);
  add_device(r, "live_bytes", live_device + live_host);
  add_device(r, "live_allocations", 56, Kind::Gauge, Unit::Count);
  add_device(r, "allocations", 1234, Kind::Counter, Unit::Count);
  add_device(r, "frees", 1178, Kind::Counter, Unit::Count);
  const std::pair<const char*, std::uint64_t> sizes[] = {{"4K", 1000}, {"64K", 200}, {"1M", 0}, {"2M", 30},
                                                         {"8M", 0},    {"32M", 0},   {"128M", 0}, {"512M", 3},
                                                         {"2G", 0},    {"inf", 1}};
  for (const auto& [bucket, n] : sizes) {
    add_device(r, "allocations_by_size", n, Kind::Counter, Unit::Count, std::string("size_max=") + bucket);
  }
  add_device(r, "peak_live_device_bytes", 3 * kGiB + kGiB / 2);
  add_device(r, "peak_live_host_bytes", live_host);
  add_device(r, "stitched_maps", 40, Kind::Counter, Unit::Count);
  add_device(r, "cache_hits", 1100, Kind::Counter, Unit::Count);
  add_device(r, "mappings_broken", 3, Kind::Counter, Unit::Count);
  add_device(r, "budget", 40 * kGiB);
  add_device(r, "out_of_memory", 0, Kind::Counter, Unit::Count);
  add_device(r, "host_held_bytes", 4600 * 2 * kMiB);
  add_device(r, "host_chunks_held", 4600, Kind::Gauge, Unit::Chunks);
  add_device(r, "host_chunks_reserve", 64, Kind::Gauge, Unit::Chunks);
  add_device(r, "host_chunks_premapped", 192, Kind::Gauge, Unit::Chunks);
  add_device(r, "live_host_bytes", live_host);
  add_device(r, "peak_host_held_bytes", 4660 * 2 * kMiB);
  add_device(r, "spilled_allocations", 30, Kind::Counter, Unit::Count);
  add_device(r, "host_chunks_pinned_inline", 12, Kind::Counter, Unit::Chunks);
  add_device(r, "host_limit", 64 * kGiB);
  return r;
}

}  // namespace uvmpool::stats::test
