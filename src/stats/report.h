// A process's statistics in one self-describing form: every figure is a named metric (kind, unit,
// help, optional label), so the exit report, the JSON file, the shared-memory segment, uvmpool-stat
// and the Prometheus text are all made from the same thing, and a reader built from an older
// uvmpool still shows the figures a newer one adds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace uvmpool::stats {

enum class Kind : std::uint8_t { Counter, Gauge };  // counters only grow (Prometheus types)
enum class Unit : std::uint8_t { Count, Bytes, Chunks, Microseconds };  // Prometheus shows microseconds as seconds

struct MetricInfo {
  std::string name;   // snake_case, e.g. "live_bytes"
  std::string label;  // "" or one "key=value", e.g. "function=cuMemAlloc_v2", "size_max=4K"
  Kind kind = Kind::Counter;
  Unit unit = Unit::Count;
  std::string help;   // one sentence
};

struct DeviceValues {
  int device = 0;
  std::vector<std::uint64_t> values;  // one per Report::device_metrics
};

struct Report {
  std::int64_t pid = 0;
  std::string command;         // the program's command line
  std::string version;         // uvmpool's version
  double start_unix_s = 0;     // when uvmpool was loaded into the process (seconds since 1970)
  double updated_unix_s = 0;   // when these figures were taken
  bool exited = false;         // the final figures of a process that has ended
  std::vector<MetricInfo> process_metrics;
  std::vector<std::uint64_t> process_values;  // one per process_metrics
  std::vector<MetricInfo> device_metrics;
  std::vector<DeviceValues> devices;          // devices the pool has served, in ordinal order
  // Facts that label every figure rather than being one (kept apart from the metrics so formats can
  // put them on samples): where the process runs ("pod", "namespace", "container", from the
  // Kubernetes downward API variables of process_labels.h), and each device's UUID by ordinal
  // ("GPU-8c2d..." as nvidia-smi writes it; "" when not known).
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<std::string> device_uuids;

  // The UUID of device `ordinal`, "" when not known.
  const std::string& device_uuid(int ordinal) const;

  // The value of a metric by name (and label), or `fallback` when this report does not have it.
  std::uint64_t process_value(const std::string& name, const std::string& label = "", std::uint64_t fallback = 0) const;
  std::uint64_t device_value(std::size_t device_index, const std::string& name, const std::string& label = "",
                             std::uint64_t fallback = 0) const;
};

const char* kind_name(Kind kind);  // "counter", "gauge"
const char* unit_name(Unit unit);  // "count", "bytes", "chunks"
bool parse_kind(const std::string& text, Kind* kind);
bool parse_unit(const std::string& text, Unit* unit);

// Helpers for readers of a report (formats, uvmpool-stat): a pointer to a metric's value, nullptr when
// the report does not have it (a writer older or newer than the reader), so "absent" and "0" differ.
const std::uint64_t* find_process_value(const Report& report, const std::string& name, const std::string& label = "");
const std::uint64_t* find_device_value(const Report& report, std::size_t device_index, const std::string& name,
                                       const std::string& label = "");
// The two halves of a label "key=value" ("" and the whole text when there is no '=').
std::string label_key(const std::string& label);
std::string label_value(const std::string& label);

}  // namespace uvmpool::stats
