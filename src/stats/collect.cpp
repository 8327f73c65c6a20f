#include "stats/collect.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "config/process_info.h"
#include "stats/counters.h"
#include "stats/process_labels.h"
#include "tiering/tiering.h"
#include "trace/trace.h"

#ifndef UVMPOOL_VERSION_STRING
#define UVMPOOL_VERSION_STRING "0.0.0"
#endif

namespace uvmpool::stats {
namespace {

using DS = pool::DeviceStats;
constexpr Kind C = Kind::Counter;
constexpr Kind G = Kind::Gauge;
constexpr Unit N = Unit::Count;
constexpr Unit B = Unit::Bytes;
constexpr Unit K = Unit::Chunks;

struct DeviceField {
  const char* name;
  Kind kind;
  Unit unit;
  std::uint64_t DS::*field;
  const char* help;
};

// Every DeviceStats figure, by tier: the device tier, then the host tier (spill), then what the pool did.
constexpr DeviceField kDeviceFields[] = {
    {"budget", G, B, &DS::budget, "UVMPOOL_DEVICE_LIMIT in bytes"},
    {"chunk_size", G, B, &DS::chunk_size, "Size of one physical chunk"},
    {"address_space_bytes", G, B, &DS::address_space_bytes, "Virtual address space the pool reserved"},
    {"live_bytes", G, B, &DS::live_bytes, "Bytes of live allocations, as asked for, in both tiers"},
    {"peak_live_bytes", G, B, &DS::peak_live_bytes, "Most live bytes at once, both tiers"},
    {"peak_live_device_bytes", G, B, &DS::peak_live_device_bytes, "Most live bytes at once in device memory"},
    {"held_bytes", G, B, &DS::held_bytes, "Device memory the pool holds (chunks, in use or idle)"},
    {"peak_held_bytes", G, B, &DS::peak_held_bytes, "Most device memory held at once"},
    {"chunks_held", G, K, &DS::chunks_held, "Device chunks the pool holds (an extent counts as its chunks)"},
    {"extent_size", G, B, &DS::extent_size, "Size of one extent, the unit large allocations are built from (0: off)"},
    {"extents_held", G, N, &DS::extents_held, "Device pieces larger than a chunk among those held (extents, and runs made for moves): one handle and one mapping each"},
    {"chunks_free", G, K, &DS::chunks_free, "Device chunks held and mapped nowhere"},
    {"chunks_cached", G, K, &DS::chunks_cached, "Device chunks in freed mappings and empty slabs kept for reuse"},
    {"carved_mapped_bytes", G, B, &DS::carved_mapped_bytes, "Device memory in carved slots (UVMPOOL_CARVE_MAX), of what is held"},
    {"carved_live_bytes", G, B, &DS::carved_live_bytes, "Bytes of carved allocations, each rounded up to 256 B; mapped less live is the free space inside slots"},
    {"carved_idle_bytes", G, B, &DS::carved_idle_bytes, "Device memory in carved slots that hold no allocation (idle, given back first)"},
    {"external_device_bytes", G, B, &DS::external_device_bytes, "The program's own cuMemCreate in device memory (counted until the driver frees it: every reference released and every mapping unmapped)"},
    {"live_host_bytes", G, B, &DS::live_host_bytes, "Bytes of live allocations that lie in pinned host memory (spilled)"},
    {"peak_live_host_bytes", G, B, &DS::peak_live_host_bytes, "Most live bytes at once in host memory"},
    {"host_held_bytes", G, B, &DS::host_held_bytes, "Pinned host memory the pool holds (mapped or in the reserve)"},
    {"peak_host_held_bytes", G, B, &DS::peak_host_held_bytes, "Most pinned host memory held at once"},
    {"host_chunks_held", G, K, &DS::host_chunks_held, "Host chunks the pool holds"},
    {"host_chunks_mapped", G, K, &DS::host_chunks_mapped, "Host chunks mapped (live, cached or premapped)"},
    {"host_chunks_reserve", G, K, &DS::host_chunks_reserve, "Host chunks pinned and unmapped, ready for the next spill"},
    {"host_chunks_premapped", G, K, &DS::host_chunks_premapped, "Host chunks mapped ahead of need, ready for the next spill"},
    {"host_chunks_cached", G, K, &DS::host_chunks_cached, "Host chunks in freed part-host mappings kept for reuse"},
    {"host_chunks_pinned_inline", C, K, &DS::host_chunks_pinned_inline, "Host chunks pinned on the allocation path (the reserve was empty)"},
    {"host_limit", G, B, &DS::host_limit, "UVMPOOL_HOST_LIMIT in bytes (process-wide)"},
    {"external_host_bytes", G, B, &DS::external_host_bytes, "The program's own device cuMemCreate served by host memory (counted until the driver frees it, as above)"},
    {"allocations", C, N, &DS::allocations, "Allocations the pool served"},
    {"frees", C, N, &DS::frees, "Pool allocations freed"},
    {"live_allocations", G, N, &DS::live_allocations, "Pool allocations live now"},
    {"stitched_maps", C, N, &DS::stitched_maps, "New mappings built (driver calls made)"},
    {"cache_hits", C, N, &DS::cache_hits, "Large allocations served by a freed mapping, with no driver call"},
    {"repeat_places_kept", C, N, &DS::repeat_places_kept, "Stream-ordered allocations placed where their point of the program (size, and how many of it live) went last"},
    {"repeat_places_missed", C, N, &DS::repeat_places_missed, "Stream-ordered allocations whose point's last place was not free: placed elsewhere"},
    {"mappings_broken", C, N, &DS::mappings_broken, "Freed mappings taken apart for their chunks"},
    {"mappings_carved", C, N, &DS::mappings_carved, "Allocations served by cutting or joining freed mappings, with no driver call"},
    {"chunks_created", C, K, &DS::chunks_created, "Device chunks created (cuMemCreate)"},
    {"chunks_released", C, K, &DS::chunks_released, "Device chunks given back to the driver (cuMemRelease)"},
    {"spilled_allocations", C, N, &DS::spilled_allocations, "Allocations placed wholly or partly in host memory"},
    {"out_of_memory", C, N, &DS::out_of_memory, "Allocations refused: device and host exhausted (CUDA_ERROR_OUT_OF_MEMORY)"},
    {"moved_to_device_bytes", C, B, &DS::moved_to_device_bytes, "Bytes moved from host to device memory at their addresses (promoted)"},
    {"moved_to_host_bytes", C, B, &DS::moved_to_host_bytes, "Bytes moved from device to host memory at their addresses (demoted)"},
    {"moved_live_to_device_bytes", C, B, &DS::moved_live_to_device_bytes, "Of the bytes promoted, those of live allocations (a carved slot or slab moves whole, with its free space)"},
    {"moved_live_to_host_bytes", C, B, &DS::moved_live_to_host_bytes, "Of the bytes demoted, those of live allocations"},
    {"moved_uncopied_bytes", C, B, &DS::moved_uncopied_bytes, "Of the bytes moved either way, those of freed mappings, remapped without a copy"},
    {"moves", C, N, &DS::moves, "Moves between the tiers committed"},
    {"moves_failed", C, N, &DS::moves_failed, "Moves refused for want of room or by a failing driver step (the old mapping stood)"},
    {"moves_in_flight", G, N, &DS::moves_in_flight, "Moves prepared and not yet committed or aborted"},
    {"move_mappings_unmapped", C, N, &DS::move_mappings_unmapped, "Mappings the committed moves unmapped at their addresses (a remap costs per mapping)"},
    {"move_mappings_mapped", C, N, &DS::move_mappings_mapped, "Mappings the committed moves mapped at their addresses"},
    {"move_commit_time", C, Unit::Microseconds, &DS::move_commit_us, "Host time the committed moves' commits took (under the mover's hold the program's work waits for it)"},
    {"move_remap_time", C, Unit::Microseconds, &DS::move_remap_us, "Of the commits' time (and failed remaps'), the remaps' driver calls; the rest is the pool's bookkeeping"},
    {"move_unmap_device_time", C, Unit::Microseconds, &DS::move_unmap_device_us, "Of the remaps' time, cuMemUnmap of device pieces (the demotions')"},
    {"move_unmap_host_time", C, Unit::Microseconds, &DS::move_unmap_host_us, "Of the remaps' time, cuMemUnmap of host pieces (the promotions'; it grows with the bytes)"},
    {"move_map_device_time", C, Unit::Microseconds, &DS::move_map_device_us, "Of the remaps' time, cuMemMap of device pieces (the promotions')"},
    {"move_map_host_time", C, Unit::Microseconds, &DS::move_map_host_us, "Of the remaps' time, cuMemMap of host pieces (the demotions')"},
    {"move_set_access_device_time", C, Unit::Microseconds, &DS::move_set_access_device_us, "Of the remaps' time, cuMemSetAccess on device pieces (the promotions')"},
    {"move_set_access_host_time", C, Unit::Microseconds, &DS::move_set_access_host_us, "Of the remaps' time, cuMemSetAccess on host pieces (the demotions'; it grows with the bytes)"},
};

std::vector<MetricInfo> make_device_infos() {
  std::vector<MetricInfo> infos;
  for (const DeviceField& f : kDeviceFields) infos.push_back({f.name, "", f.kind, f.unit, f.help});
  for (int i = 0; i < pool::kSizeBuckets; ++i) {
    infos.push_back({"allocations_by_size", std::string("size_max=") + pool::kSizeBucketNames[i], C, N,
                     "Allocations the pool served, by the bytes asked for (upper bound of the bucket)"});
  }
  return infos;
}

// Process-wide figures: what reached the hooks, before any pool.
struct ProcessField {
  const char* name;
  const char* help;
  const std::atomic<std::uint64_t> Counters::*field;
};
constexpr ProcessField kProcessFields[] = {
    // Named apart from the device figures "allocations" and "frees", so Prometheus families never mix scopes.
    {"intercepted_allocations", "Device allocations that reached uvmpool", &Counters::allocations},
    {"intercepted_frees", "Frees that reached uvmpool", &Counters::frees},
    {"intercepted_bytes", "Sum of the sizes of those allocations", &Counters::bytes_allocated},
    {"pool_allocations", "Allocations the pool served", &Counters::pool_allocations},
    {"driver_allocations", "Allocations passed through to the driver (explicit memory pools, graph capture, no VMM, UVMPOOL_POOL=0)",
     &Counters::driver_allocations},
    {"ipc_opens_served", "CUDA IPC opens of this process's pool memory served to other processes", &Counters::ipc_opens},
    {"ipc_closes_seen", "Of those, the ones ended (closed, or the importer gone) and dealt with: open now is served - seen",
     &Counters::ipc_closes},
};

// What the launch hooks saw (src/tiering): process-wide, since a launch names no device up front.
struct TieringField {
  const char* name;
  const char* help;
  std::uint64_t tiering::Stats::*field;
  bool bytes = false;
  bool gauge = false;  // a value now, not a count that only grows
};
constexpr TieringField kTieringFields[] = {
    {"launches_read", "Kernel launches whose arguments were read for pool pointers (done while spilled memory exists)",
     &tiering::Stats::launches_read},
    {"launches_unread", "Launches whose arguments could not be read (the driver gave no parameter layout)",
     &tiering::Stats::launches_unread},
    {"launch_pointers", "Pool pointers found in the arguments of those launches", &tiering::Stats::pointers},
    {"launch_host_pointers", "Of those pointers, the ones into host memory", &tiering::Stats::host_pointers},
    {"launches_in_place", "Launches given memory in the host tier: they read it in place over PCIe",
     &tiering::Stats::launches_in_place},
    {"transfers_read",
     "Copies, memsets and stream memory operations on pool memory seen while host memory was mapped (shown to the "
     "policy as launches)",
     &tiering::Stats::transfers_read},
    {"transfers_in_place", "Of those, the ones reading or writing memory in the host tier, over PCIe",
     &tiering::Stats::transfers_in_place},
    {"launches_captured", "Launches, copies and memsets recorded into a graph capture (they touch memory when the graph runs)",
     &tiering::Stats::captured},
    {"graph_launches_read", "Graph launches seen while host memory was mapped, shown to the policy with their graph's touches",
     &tiering::Stats::graph_launches_read},
    {"graph_launches_unread", "Graph launches of graphs built by calls uvmpool does not follow, or unreadable (treated as touching everything)",
     &tiering::Stats::graph_launches_unread},
    {"param_layouts_asked", "Kernels whose parameter layout was asked of the driver (once each)",
     &tiering::Stats::layouts_asked},
    {"tiering_moves", "Moves between the tiers the tiering mover committed", &tiering::Stats::moves},
    {"tiering_promoted_bytes", "Bytes the tiering mover moved into device memory", &tiering::Stats::promoted_bytes, true},
    {"tiering_demoted_bytes", "Bytes the tiering mover moved into host memory", &tiering::Stats::demoted_bytes, true},
    {"tiering_launches_ordered", "Launches, copies and memsets queued behind a move's commit (UVMPOOL_TIERING_COPY=overlap)",
     &tiering::Stats::launches_ordered},
    {"tiering_ordered_on_host", "Of those, the ones whose thread waited for the commit (the stream wait was refused)",
     &tiering::Stats::ordered_on_host},
    {"tiering_moves_failed", "Moves refused by the pool or a failing driver step (the old mapping kept)",
     &tiering::Stats::moves_failed},
    {"tiering_epochs", "Times the mover held the program's streams to commit moves", &tiering::Stats::epochs},
    {"tiering_holds_given_up", "Holds the watchdog gave up (the program's work did not drain in time); after two, moves stop",
     &tiering::Stats::holds_given_up},
    {"tiering_holds_extended",
     "Times a hold was waited for past the hold timeout because the device still got through the program's earlier work",
     &tiering::Stats::holds_extended},
    {"tiering_holds_broken",
     "Times the mover's standing holds were released because the pool waited for the device (their moves dropped)",
     &tiering::Stats::holds_broken},
    {"tiering_host_waits", "Program calls that waited outside the driver while the mover held its streams (copies, kernel loads)",
     &tiering::Stats::host_waits},
    {"tiering_queue_waits",
     "Launches, copies and memsets that waited outside the driver during a hold, the program being 512 launches ahead of the device",
     &tiering::Stats::queue_waits},
    {"tiering_mover_step",
     "What the tiering mover does now: 0 idle, 1 preparing moves, 2 closing the host-wait gate, 3 waiting for the "
     "program's work to reach its hold, 4 waiting for the pool's lock, 5 copying, 6 remapping, 7 waiting for the "
     "program's queued work before taking idle memory apart",
     &tiering::Stats::mover_step, false, true},
    {"tiering_mover_step_seconds", "How long the mover has been at its current step, in whole seconds (0 when idle)",
     &tiering::Stats::mover_step_seconds, false, true},
    {"tiering_holds_standing", "The mover's holds on the program's streams standing now (placed ahead, not yet released)",
     &tiering::Stats::holds_standing, false, true},
    {"tiering_gate_closed", "1 while the host-wait gate is closed (the program's calls that may wait in the driver wait outside it)",
     &tiering::Stats::gate_closed, false, true},
    {"tiering_gate_waiting", "The program's calls waiting at the closed host-wait gate now", &tiering::Stats::gate_waiting,
     false, true},
    {"tiering_period", "Launches in the launch sequence the policy learned (0: none yet, recency rules)",
     &tiering::Stats::policy_period, false, true},
    {"tiering_periods_learned", "Times the policy learned a launch period (again when it took it anew or replaced it)",
     &tiering::Stats::periods_learned},
    {"tiering_periods_dropped", "Times the policy dropped the period it had learned (the launches no longer repeated it)",
     &tiering::Stats::periods_dropped},
    {"tiering_periods_retaken", "Times the policy took the learned period's copy anew from the last period (launches it did not foresee, the same period still repeating)",
     &tiering::Stats::periods_retaken},
    {"tiering_kept_in_place", "Thrash-guard decisions: memory left in host memory and read in place",
     &tiering::Stats::kept_in_place},
    {"tiering_parts_promoted", "Of those decisions, the ones that promoted the part of the memory that fit the device room there was",
     &tiering::Stats::parts_promoted},
    {"tiering_guard_trials", "Thrash-guard trials: the learned period timed on the GPU with the guard on and off",
     &tiering::Stats::guard_trials},
    {"tiering_guard_off", "1 while the thrash guard is off (memory touched once a period moves in like the rest), else 0",
     &tiering::Stats::guard_off, false, true},
    {"tiering_epochs_trials", "Trials of which thread runs the mover's epochs: the learned period timed on the GPU with them on the mover's thread and on the launching thread (UVMPOOL_TIERING_EPOCHS=measure)",
     &tiering::Stats::epochs_trials},
    {"tiering_epochs_on_launch", "1 while the launching thread runs the mover's epochs (measured faster, or UVMPOOL_TIERING_EPOCHS=launch), else 0",
     &tiering::Stats::epochs_on_launch, false, true},
    {"tiering_kept_by_advice", "Promotions not asked for because the memory was advised to prefer host memory",
     &tiering::Stats::kept_by_advice},
    {"tiering_prefetches", "Prefetches of pool memory (cuMemPrefetchAsync, uvmpool_prefetch)", &tiering::Stats::prefetches},
    {"tiering_advice", "Advice given on pool memory (cuMemAdvise, uvmpool_advise)", &tiering::Stats::advice},
};

std::vector<MetricInfo> make_process_infos() {
  std::vector<MetricInfo> infos;
  for (const ProcessField& f : kProcessFields) {
    infos.push_back({f.name, "", C, f.field == &Counters::bytes_allocated ? B : N, f.help});
  }
  infos.push_back({"resolved_via_dlsym", "", C, N, "Hooks handed out by the dlsym override"});
  infos.push_back({"resolved_via_getproc", "", C, N, "Hooks handed out by cuGetProcAddress"});
  infos.push_back({"calls_via_export", "", C, N, "Calls to uvmpool's exported cu* symbols"});
  infos.push_back({"trace_events", "", C, N, "Events written to the UVMPOOL_TRACE file"});
  infos.push_back({"trace_dropped", "", C, N, "Trace events lost (a ring was full, or the file reached UVMPOOL_TRACE_MAX)"});
  for (const TieringField& f : kTieringFields) infos.push_back({f.name, "", f.gauge ? G : C, f.bytes ? B : N, f.help});
  for (std::size_t i = 1; i < tiering::kMoverSteps; ++i) {  // Idle is not work
    infos.push_back({"tiering_mover_time", std::string("step=") + tiering::step_key(static_cast<tiering::MoverStep>(i)), C,
                     Unit::Microseconds, "Host time the tiering mover spent at one step of its epochs"});
  }
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    if (driver::kFunctions[i].kind == driver::Kind::Hook) {
      infos.push_back({"hook_calls", std::string("function=") + driver::kFunctions[i].symbol, C, N,
                       "Calls that reached uvmpool's hook of one driver function"});
    }
  }
  return infos;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// When the library was loaded (static initialization): the report's start, whether or not live
// statistics were published (the first collect may come only at exit).
const double g_loaded_unix_s = unix_now();

// Set once (set_device_uuids) and never freed: collect may run on any thread, at exit included.
std::atomic<const std::vector<std::string>*> g_device_uuids{nullptr};

}  // namespace

const std::vector<MetricInfo>& device_metric_infos() {
  static const std::vector<MetricInfo>* infos = new std::vector<MetricInfo>(make_device_infos());
  return *infos;
}

std::vector<std::uint64_t> device_values(const pool::DeviceStats& s) {
  std::vector<std::uint64_t> values;
  values.reserve(device_metric_infos().size());
  for (const DeviceField& f : kDeviceFields) values.push_back(s.*f.field);
  for (int i = 0; i < pool::kSizeBuckets; ++i) values.push_back(s.allocations_by_size[i]);
  return values;
}

void set_device_uuids(std::vector<std::string> uuids) {
  g_device_uuids.store(new std::vector<std::string>(std::move(uuids)), std::memory_order_release);
}

Report collect(const pool::Pool* pool) {
  // Made once: every Report of the process has the same metrics (the segment's layout relies on it).
  static const std::vector<MetricInfo>* process_infos = new std::vector<MetricInfo>(make_process_infos());
  static const std::string* command = new std::string(config::command_line());
  static const auto* labels = new std::vector<std::pair<std::string, std::string>>(kubernetes_labels());
  Report r;
  r.pid = getpid();
  r.command = *command;
  r.version = UVMPOOL_VERSION_STRING;
  r.start_unix_s = g_loaded_unix_s;
  r.updated_unix_s = unix_now();
  r.process_metrics = *process_infos;
  r.device_metrics = device_metric_infos();
  r.labels = *labels;
  if (const std::vector<std::string>* uuids = g_device_uuids.load(std::memory_order_acquire)) r.device_uuids = *uuids;

  const Counters& c = counters();
  for (const ProcessField& f : kProcessFields) r.process_values.push_back((c.*f.field).load(std::memory_order_relaxed));
  for (int i = 0; i < static_cast<int>(Route::kCount); ++i) r.process_values.push_back(c.routes[i].load(std::memory_order_relaxed));
  const trace::Status t = trace::status();
  r.process_values.push_back(t.events);
  r.process_values.push_back(t.dropped);
  const tiering::Tiering* tiering = tiering::Tiering::existing();
  const tiering::Stats ts = tiering != nullptr ? tiering->stats() : tiering::Stats{};
  for (const TieringField& f : kTieringFields) r.process_values.push_back(ts.*f.field);
  for (std::size_t i = 1; i < tiering::kMoverSteps; ++i) r.process_values.push_back(ts.mover_step_us[i]);
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    if (driver::kFunctions[i].kind == driver::Kind::Hook) r.process_values.push_back(c.hook_calls[i].load(std::memory_order_relaxed));
  }

  if (pool != nullptr) {
    for (int d = 0; d < pool->device_count(); ++d) {
      const pool::DeviceStats s = pool->stats(d);
      if (s.chunk_size == 0) continue;  // never used (or no VMM): nothing to show
      r.devices.push_back({d, device_values(s)});
    }
  }
  return r;
}

Report collect_process() { return collect(pool::Pool::existing()); }

}  // namespace uvmpool::stats
