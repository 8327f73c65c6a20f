// The Report's lookups and the names of its enums (the words the segment's descriptors and the
// Prometheus text use).
#include "stats/report.h"

namespace uvmpool::stats {

namespace {

// Reports have a few dozen metrics and are read a few times a second at most: a linear search is
// cheaper than keeping an index in step with the vectors.
const std::uint64_t* find(const std::vector<MetricInfo>& metrics, const std::vector<std::uint64_t>& values,
                          const std::string& name, const std::string& label) {
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    // A report assembled by hand (or read from a damaged segment) may have fewer values than metrics.
    if (metrics[i].name == name && metrics[i].label == label) return i < values.size() ? &values[i] : nullptr;
  }
  return nullptr;
}

}  // namespace

const std::uint64_t* find_process_value(const Report& report, const std::string& name, const std::string& label) {
  return find(report.process_metrics, report.process_values, name, label);
}

const std::uint64_t* find_device_value(const Report& report, std::size_t device_index, const std::string& name,
                                       const std::string& label) {
  if (device_index >= report.devices.size()) return nullptr;
  return find(report.device_metrics, report.devices[device_index].values, name, label);
}

const std::string& Report::device_uuid(int ordinal) const {
  static const std::string unknown;
  return ordinal >= 0 && static_cast<std::size_t>(ordinal) < device_uuids.size() ? device_uuids[ordinal] : unknown;
}

std::uint64_t Report::process_value(const std::string& name, const std::string& label, std::uint64_t fallback) const {
  const std::uint64_t* v = find_process_value(*this, name, label);
  return v != nullptr ? *v : fallback;
}

std::uint64_t Report::device_value(std::size_t device_index, const std::string& name, const std::string& label,
                                   std::uint64_t fallback) const {
  const std::uint64_t* v = find_device_value(*this, device_index, name, label);
  return v != nullptr ? *v : fallback;
}

std::string label_key(const std::string& label) {
  const auto eq = label.find('=');
  return eq == std::string::npos ? std::string() : label.substr(0, eq);
}

std::string label_value(const std::string& label) {
  const auto eq = label.find('=');
  return eq == std::string::npos ? label : label.substr(eq + 1);
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Counter: return "counter";
    case Kind::Gauge: return "gauge";
  }
  return "gauge";
}

const char* unit_name(Unit unit) {
  switch (unit) {
    case Unit::Count: return "count";
    case Unit::Bytes: return "bytes";
    case Unit::Chunks: return "chunks";
    case Unit::Microseconds: return "microseconds";
  }
  return "count";
}

bool parse_kind(const std::string& text, Kind* kind) {
  if (text == "counter") {
    *kind = Kind::Counter;
  } else if (text == "gauge") {
    *kind = Kind::Gauge;
  } else {
    return false;
  }
  return true;
}

bool parse_unit(const std::string& text, Unit* unit) {
  if (text == "count") {
    *unit = Unit::Count;
  } else if (text == "bytes") {
    *unit = Unit::Bytes;
  } else if (text == "chunks") {
    *unit = Unit::Chunks;
  } else if (text == "microseconds") {
    *unit = Unit::Microseconds;
  } else {
    return false;
  }
  return true;
}

}  // namespace uvmpool::stats
