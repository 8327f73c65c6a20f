// The table, JSON and Prometheus formats of a Report (format.h). Metrics are looked up by name, never
// by position, and any that is missing is left out, so the formats work across writer versions.
#include "stats/format.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "tiering/mover_step.h"

namespace uvmpool::stats {

namespace {

using Value = std::optional<std::uint64_t>;

Value process(const Report& r, const char* name, const std::string& label = "") {
  const std::uint64_t* v = find_process_value(r, name, label);
  return v != nullptr ? Value(*v) : std::nullopt;
}

Value device(const Report& r, std::size_t d, const char* name, const std::string& label = "") {
  const std::uint64_t* v = find_device_value(r, d, name, label);
  return v != nullptr ? Value(*v) : std::nullopt;
}

std::string format(const char* fmt, auto... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

std::string count(std::uint64_t v) { return format("%" PRIu64, v); }

// Items of one clause joined with ", ", clauses with "; ": absent metrics simply leave no item.
class Sentence {
 public:
  void add(const std::string& item) { (clause_.empty() ? clause_ : clause_.append(", ")).append(item); }
  void add(Value v, const char* what) {
    if (v) add(count(*v) + " " + what);
  }
  void end_clause() {
    if (clause_.empty()) return;
    (text_.empty() ? text_ : text_.append("; ")).append(clause_);
    clause_.clear();
  }
  std::string text() {
    end_clause();
    return text_;
  }

 private:
  std::string text_, clause_;
};

class Lines {
 public:
  explicit Lines(bool prefix) : prefix_(prefix) {}
  void add(const std::string& line) {
    if (prefix_) out_ += "[uvmpool] ";
    out_ += line;
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  bool prefix_;
  std::string out_;
};

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// One row of the device table: name, live, peak live, held, peak held (bytes), chunks.
std::string row(const std::string& name, Value live, Value peak_live, Value held, Value peak_held, Value chunks) {
  auto size = [](Value v) { return v ? format_size(*v) : std::string("-"); };
  return pad_right(name, 10) + pad_left(size(live), 11) + pad_left(size(peak_live), 11) + pad_left(size(held), 11) +
         pad_left(size(peak_held), 11) + pad_left(chunks ? count(*chunks) : "-", 9);
}

void device_lines(const Report& r, std::size_t d, Lines& lines) {
  lines.add(pad_right("device " + std::to_string(r.devices[d].device), 10) + pad_left("live", 11) +
            pad_left("peak live", 11) + pad_left("held", 11) + pad_left("peak held", 11) + pad_left("chunks", 9));
  const Value live = device(r, d, "live_bytes");
  const Value live_host = device(r, d, "live_host_bytes");
  Value live_device = live;
  if (live) live_device = *live - std::min(*live, live_host.value_or(0));  // live_bytes counts both tiers
  lines.add(row("  device", live_device, device(r, d, "peak_live_device_bytes"), device(r, d, "held_bytes"),
                device(r, d, "peak_held_bytes"), device(r, d, "chunks_held")));
  const Value peak_host_held = device(r, d, "peak_host_held_bytes");
  const bool had_host = peak_host_held.value_or(0) != 0 || live_host.value_or(0) != 0;
  if (had_host) {
    lines.add(row("  host", live_host, device(r, d, "peak_live_host_bytes"), device(r, d, "host_held_bytes"),
                  peak_host_held, device(r, d, "host_chunks_held")));
  }

  Sentence s;
  const Value allocations = device(r, d, "allocations"), live_allocations = device(r, d, "live_allocations");
  if (allocations) {
    s.add(count(*allocations) + " allocations" + (live_allocations ? " (" + count(*live_allocations) + " live)" : ""));
  } else {
    s.add(live_allocations, "live allocations");
  }
  s.add(device(r, d, "frees"), "frees");
  s.end_clause();
  s.add(device(r, d, "stitched_maps"), "mappings stitched");
  s.add(device(r, d, "cache_hits"), "cache hits");
  s.add(device(r, d, "mappings_broken"), "taken apart");
  s.add(device(r, d, "mappings_carved"), "cut or joined");
  s.end_clause();
  s.add(device(r, d, "spilled_allocations"), "spilled");
  s.end_clause();
  s.add(device(r, d, "out_of_memory"), "out of memory");
  if (const std::string text = s.text(); !text.empty()) lines.add("  " + text);

  // allocations_by_size, in the writer's bucket order; the last bucket ("inf") is "more than" the one before.
  std::string by_size, previous;
  for (std::size_t m = 0; m < r.device_metrics.size(); ++m) {
    const MetricInfo& info = r.device_metrics[m];
    if (info.name != "allocations_by_size" || m >= r.devices[d].values.size()) continue;
    const std::string bucket = label_value(info.label);
    const std::uint64_t v = r.devices[d].values[m];
    if (v != 0) {
      const std::string name = bucket == "inf" ? (previous.empty() ? "larger" : ">" + previous) : "<=" + bucket;
      (by_size.empty() ? by_size : by_size.append(", ")).append(name + " " + count(v));
    }
    previous = bucket;
  }
  if (!by_size.empty()) lines.add("  by size: " + by_size);

  Sentence host;
  const Value chunk_size = device(r, d, "chunk_size");
  const Value reserve = device(r, d, "host_chunks_reserve");
  const Value premapped = device(r, d, "host_chunks_premapped");
  const Value inline_pinned = device(r, d, "host_chunks_pinned_inline");
  if (had_host || reserve.value_or(0) != 0 || premapped.value_or(0) != 0 || inline_pinned.value_or(0) != 0) {
    // The reserve's loose chunks and its premapped runs are both ready for the next spill.
    auto chunks = [&](std::uint64_t n) { return chunk_size ? format_size(n * *chunk_size) : count(n) + " chunks"; };
    if (reserve || premapped) {
      std::string ready = "host reserve: " + chunks(reserve.value_or(0) + premapped.value_or(0)) + " ready";
      if (premapped.value_or(0) != 0) ready += " (" + chunks(*premapped) + " premapped)";
      host.add(ready);
    }
    host.add(inline_pinned, "chunks pinned inline");
    host.end_clause();
  }
  if (const Value limit = device(r, d, "host_limit"); limit.value_or(0) != 0) {
    host.add("host limit " + format_size(*limit));
  }
  host.end_clause();
  if (const Value budget = device(r, d, "budget"); budget.value_or(0) != 0) host.add("budget " + format_size(*budget));
  if (const std::string text = host.text(); !text.empty()) lines.add("  " + text);
}

// What tiering is doing at this moment, when it is doing anything: for a program that seems stuck,
// whether the mover waits (and for what, since when) and whether the program's calls wait for it.
void tiering_now_line(const Report& r, Lines& lines) {
  const std::uint64_t step = process(r, "tiering_mover_step").value_or(0);
  const std::uint64_t standing = process(r, "tiering_holds_standing").value_or(0);
  const bool closed = process(r, "tiering_gate_closed").value_or(0) != 0;
  if (step == 0 && standing == 0 && !closed) return;
  Sentence s;
  if (step != 0) {
    const auto name = tiering::step_name(static_cast<tiering::MoverStep>(step));
    s.add(std::string("mover ") + name + " for " + count(process(r, "tiering_mover_step_seconds").value_or(0)) + " s");
  }
  if (standing != 0) s.add(Value(standing), standing == 1 ? "hold standing" : "holds standing");
  s.end_clause();
  if (closed) {
    const std::uint64_t waiting = process(r, "tiering_gate_waiting").value_or(0);
    s.add("host-wait gate closed, " + count(waiting) + (waiting == 1 ? " call waiting" : " calls waiting"));
  }
  lines.add("  tiering now: " + s.text());
}

// What tiering saw and did (docs/tiering.md), once it read a launch or moved something.
void tiering_line(const Report& r, Lines& lines) {
  const Value read = process(r, "launches_read"), moves = process(r, "tiering_moves");
  if (read.value_or(0) == 0 && moves.value_or(0) == 0) return;
  Sentence s;
  s.add(read, "launches read");
  s.add(process(r, "launches_in_place"), "given host memory in place");
  s.end_clause();
  if (moves) {
    std::string text = count(*moves) + " moves";
    if (const Value epochs = process(r, "tiering_epochs")) text += " in " + count(*epochs) + " holds";
    s.add(text);
  }
  if (const Value up = process(r, "tiering_promoted_bytes")) s.add(format_size(*up) + " promoted");
  if (const Value down = process(r, "tiering_demoted_bytes")) s.add(format_size(*down) + " demoted");
  s.add(process(r, "tiering_moves_failed"), "refused or failed");
  s.end_clause();
  // Where the mover's time went (steps of a millisecond or more): what its epochs wait for.
  bool first = true;
  for (const char* step : {"preparing", "draining", "copying", "remapping", "waiting_for_pool", "closing_gate", "fencing"}) {
    const Value us = process(r, "tiering_mover_time", std::string("step=") + step);
    if (us.value_or(0) < 1000) continue;
    std::string name = step;
    std::replace(name.begin(), name.end(), '_', ' ');
    s.add(format("%s%.2f s %s", first ? "mover " : "", static_cast<double>(*us) / 1e6, name.c_str()));
    first = false;
  }
  s.end_clause();
  const Value period = process(r, "tiering_period");
  if (period) s.add(*period != 0 ? "period " + count(*period) + " launches" : std::string("no period learned"));
  s.add(process(r, "tiering_kept_in_place"), "kept in place");
  if (const Value off = process(r, "tiering_guard_off"); off.value_or(0) != 0) s.add("thrash guard off (measured faster)");
  if (const Value launch = process(r, "tiering_epochs_on_launch"); launch.value_or(0) != 0) s.add("epochs on the launching thread");
  s.end_clause();
  if (const Value given_up = process(r, "tiering_holds_given_up"); given_up.value_or(0) != 0) s.add(given_up, "holds given up");
  if (const Value extended = process(r, "tiering_holds_extended"); extended.value_or(0) != 0)
    s.add(extended, "hold timeouts waited past (the device busy)");
  if (const Value broken = process(r, "tiering_holds_broken"); broken.value_or(0) != 0) s.add(broken, "holds released for pool waits");
  if (const Value waits = process(r, "tiering_queue_waits"); waits.value_or(0) != 0)
    s.add(waits, "launches held back during holds (512 ahead of the device)");
  // Ordered epochs (UVMPOOL_TIERING_COPY=overlap): the work that waited for a commit in its stream.
  if (const Value ordered = process(r, "tiering_launches_ordered"); ordered.value_or(0) != 0) {
    s.add(ordered, "launches ordered behind a move");
    if (const Value host = process(r, "tiering_ordered_on_host"); host.value_or(0) != 0) s.add(host, "of them waited for on the host");
  }
  if (const std::string text = s.text(); !text.empty()) lines.add("  tiering: " + text);
  tiering_now_line(r, lines);
}

void process_lines(const Report& r, Lines& lines) {
  Sentence s;
  if (const Value allocations = process(r, "intercepted_allocations")) {
    std::string text = count(*allocations) + " allocations";
    const Value pool = process(r, "pool_allocations"), driver = process(r, "driver_allocations");
    if (pool && driver) {
      text += " (" + count(*pool) + " pool, " + count(*driver) + " driver)";
    } else if (pool || driver) {
      text += pool ? " (" + count(*pool) + " pool)" : " (" + count(*driver) + " driver)";
    }
    s.add(text);
  }
  s.add(process(r, "intercepted_frees"), "frees");
  s.end_clause();
  const Value dlsym = process(r, "resolved_via_dlsym"), getproc = process(r, "resolved_via_getproc");
  if (dlsym || getproc) {
    std::string text = "hooks handed out: ";
    if (dlsym) text += count(*dlsym) + " via dlsym";
    if (getproc) text += (dlsym ? ", " : "") + count(*getproc) + " via cuGetProcAddress";
    s.add(text);
  }
  s.end_clause();
  s.add(process(r, "calls_via_export"), "calls via exports");
  s.end_clause();
  const Value events = process(r, "trace_events"), dropped = process(r, "trace_dropped");
  if (events.value_or(0) != 0 || dropped.value_or(0) != 0) {
    s.add("trace: " + count(events.value_or(0)) + " events (" + count(dropped.value_or(0)) + " dropped)");
  }
  if (const std::string text = s.text(); !text.empty()) lines.add("process: " + text);
  tiering_line(r, lines);

  std::vector<std::pair<std::uint64_t, std::string>> calls;
  for (std::size_t m = 0; m < r.process_metrics.size() && m < r.process_values.size(); ++m) {
    if (r.process_metrics[m].name == "hook_calls" && r.process_values[m] != 0) {
      calls.emplace_back(r.process_values[m], label_value(r.process_metrics[m].label));
    }
  }
  std::sort(calls.begin(), calls.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  constexpr std::size_t kTop = 8;
  std::string most;
  for (std::size_t i = 0; i < calls.size() && i < kTop; ++i) {
    (most.empty() ? most : most.append(", ")).append(calls[i].second + " " + count(calls[i].first));
  }
  if (calls.size() > kTop) most += ", ...";
  if (!most.empty()) lines.add("  most called: " + most);
}

// The command as shown in the table's first line: long ones are cut (the JSON has it whole).
std::string short_command(const std::string& command) {
  constexpr std::size_t kMax = 80;
  return command.size() <= kMax ? command : command.substr(0, kMax - 3) + "...";
}

}  // namespace

std::string format_size(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (unit < 6 && bytes >= (std::uint64_t{1024} << (10 * unit))) ++unit;
  if (unit == 0) return count(bytes) + " B";
  const std::uint64_t scale = std::uint64_t{1} << (10 * unit);
  const double v = static_cast<double>(bytes) / static_cast<double>(scale);
  // Whole numbers (limits, reserves) stay whole; others keep one decimal below 100.
  if (bytes % scale == 0 || v >= 99.95) return format("%.0f %s", v, kUnits[unit]);
  return format("%.1f %s", v, kUnits[unit]);
}

std::string format_duration(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  // A segment's times are whatever its writer put there: past 2^64 s the cast below is undefined
  // (found by tests/fuzz/segment_fuzz.cpp). 1e15 s is 30 million years.
  if (seconds > 1e15) seconds = 1e15;
  if (seconds < 59.95) return format("%.1f s", seconds);
  const auto s = static_cast<std::uint64_t>(seconds);
  if (s < 3600) return format("%" PRIu64 " min %02" PRIu64 " s", s / 60, s % 60);
  if (s < 86400) return format("%" PRIu64 " h %02" PRIu64 " min", s / 3600, s % 3600 / 60);
  return format("%" PRIu64 " d %02" PRIu64 " h", s / 86400, s % 86400 / 3600);
}

std::string program_name(const std::string& command) {
  const std::string argv0 = command.substr(0, command.find(' '));
  const auto slash = argv0.rfind('/');
  return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
}

double uptime_s(const Report& report) { return std::max(0.0, report.updated_unix_s - report.start_unix_s); }

std::string format_table(const Report& report, bool prefix) {
  Lines lines(prefix);
  std::string first = "pid " + std::to_string(report.pid);
  if (!report.command.empty()) first += " (" + short_command(report.command) + ")";
  if (!report.version.empty()) first += ", uvmpool " + report.version;
  first += ", " + format_duration(uptime_s(report));
  if (report.exited) first += " (exited)";
  lines.add(first);
  for (std::size_t d = 0; d < report.devices.size(); ++d) device_lines(report, d, lines);
  process_lines(report, lines);
  return lines.take();
}

namespace {

// name: value, or for labelled metrics name: {label value: value}. An unlabelled and a labelled
// metric of one name cannot both be kept: the first one wins.
void put(nlohmann::json& object, const MetricInfo& info, std::uint64_t value) {
  if (info.label.empty()) {
    if (!object.contains(info.name)) object[info.name] = value;
    return;
  }
  nlohmann::json& nested = object[info.name];
  if (nested.is_null()) nested = nlohmann::json::object();
  if (nested.is_object()) nested[label_value(info.label)] = value;
}

}  // namespace

nlohmann::json to_json_value(const Report& report) {
  nlohmann::json j = nlohmann::json::object();
  j["pid"] = report.pid;
  j["command"] = report.command;
  j["version"] = report.version;
  j["start_unix_s"] = report.start_unix_s;
  j["updated_unix_s"] = report.updated_unix_s;
  j["uptime_s"] = std::round(uptime_s(report) * 1000) / 1000;  // ms: no 12.299999952316284
  j["exited"] = report.exited;
  if (!report.labels.empty()) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [key, value] : report.labels) labels[key] = value;
    j["labels"] = std::move(labels);
  }
  nlohmann::json units = nlohmann::json::object();
  nlohmann::json process_object = nlohmann::json::object();
  for (std::size_t m = 0; m < report.process_metrics.size() && m < report.process_values.size(); ++m) {
    put(process_object, report.process_metrics[m], report.process_values[m]);
    units[report.process_metrics[m].name] = unit_name(report.process_metrics[m].unit);
  }
  j["process"] = std::move(process_object);
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceValues& dv : report.devices) {
    nlohmann::json d = nlohmann::json::object();
    d["device"] = dv.device;
    if (!report.device_uuid(dv.device).empty()) d["uuid"] = report.device_uuid(dv.device);
    for (std::size_t m = 0; m < report.device_metrics.size() && m < dv.values.size(); ++m) {
      if (report.device_metrics[m].name != "device") put(d, report.device_metrics[m], dv.values[m]);
    }
    devices.push_back(std::move(d));
  }
  for (const MetricInfo& info : report.device_metrics) units[info.name] = unit_name(info.unit);
  j["devices"] = std::move(devices);
  j["units"] = std::move(units);
  return j;
}

// Strings come from segments any process may have written (the command line, labels): bytes that are
// not UTF-8 are replaced (U+FFFD), never thrown about (found by tests/fuzz/segment_fuzz.cpp).
std::string to_json(const Report& report) {
  return to_json_value(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

// Prometheus names allow [a-zA-Z_:][a-zA-Z0-9_:]*, label names the same without ':'. A report read
// from a segment is checked by the reader, but one made elsewhere is not: anything else becomes '_'.
std::string sanitize(const std::string& name, bool colon) {
  std::string out = name.empty() ? "_" : name;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) out[i] = '_';
  }
  return out;
}

std::string escape(const std::string& text, bool quote) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

struct Family {
  std::string help;
  Kind kind;
  std::string samples;
};

class Exposition {
 public:
  // One sample; `labels` is already rendered ("pid=\"1\",..."). A metric name met again with another
  // kind (a different writer version) cannot share the family's TYPE and is left out.
  void add(const std::string& metric, Kind kind, Unit unit, const std::string& help, const std::string& labels,
           const std::string& value) {
    // Prometheus's conventions: the base unit in the name, then _total for a counter.
    std::string name = "uvmpool_" + sanitize(metric, true);
    if (unit == Unit::Bytes && !name.ends_with("_bytes")) name += "_bytes";
    if (unit == Unit::Microseconds && !name.ends_with("_seconds")) name += "_seconds";
    if (kind == Kind::Counter && !name.ends_with("_total")) name += "_total";
    auto [it, inserted] = families_.try_emplace(name, Family{help, kind, {}});
    if (inserted) order_.push_back(name);
    if (it->second.kind != kind) return;
    it->second.samples += name + "{" + labels + "} " + value + "\n";
  }
  std::string text() const {
    std::string out;
    for (const std::string& name : order_) {
      const Family& f = families_.at(name);
      if (!f.help.empty()) out += "# HELP " + name + " " + escape(f.help, false) + "\n";
      out += "# TYPE " + name + " " + kind_name(f.kind) + "\n";
      out += f.samples;
    }
    return out;
  }

 private:
  std::map<std::string, Family> families_;
  std::vector<std::string> order_;
};

// A sample's value in the base unit its name carries (microseconds are shown as seconds).
std::string sample(Unit unit, std::uint64_t value) {
  return unit == Unit::Microseconds ? format("%.6f", static_cast<double>(value) / 1e6) : count(value);
}

std::string label(const std::string& key, const std::string& value) { return key + "=\"" + escape(value, true) + "\""; }

// The metric's own "key=value" label, after the process's (and device's) labels. A key that would
// repeat one of ours is renamed, since a label name may appear only once per sample.
std::string own_label(const std::string& metric_label) {
  if (metric_label.empty()) return "";
  std::string key = sanitize(label_key(metric_label).empty() ? "label" : label_key(metric_label), false);
  if (key == "pid" || key == "program" || key == "device" || key == "uuid" || key == "pod" || key == "namespace" ||
      key == "container" || key.starts_with("__")) {
    key = "metric_" + key;
  }
  return "," + label(key, label_value(metric_label));
}

// pid, program, then where the process runs (pod, namespace, container) when known.
std::string process_labels(const Report& r) {
  std::string labels = label("pid", std::to_string(r.pid)) + "," + label("program", program_name(r.command));
  for (const auto& [key, value] : r.labels) {
    if (key == "pod" || key == "namespace" || key == "container") labels += "," + label(key, value);
  }
  return labels;
}

}  // namespace

std::string to_prometheus(const std::vector<Report>& reports) {
  Exposition e;
  for (const Report& r : reports) {
    const std::string base = process_labels(r);
    e.add("up", Kind::Gauge, Unit::Count, "1 while the process publishes its statistics, 0 once it has exited.", base,
          r.exited ? "0" : "1");
    e.add("start_time_seconds", Kind::Gauge, Unit::Count,
          "When the process started using uvmpool, in seconds since 1970.", base, format("%.3f", r.start_unix_s));
  }
  for (const Report& r : reports) {
    const std::string base = process_labels(r);
    for (std::size_t m = 0; m < r.process_metrics.size() && m < r.process_values.size(); ++m) {
      const MetricInfo& info = r.process_metrics[m];
      e.add(info.name, info.kind, info.unit, info.help, base + own_label(info.label), sample(info.unit, r.process_values[m]));
    }
  }
  for (const Report& r : reports) {
    const std::string base = process_labels(r);
    for (const DeviceValues& dv : r.devices) {
      std::string labels = base + "," + label("device", std::to_string(dv.device));
      if (!r.device_uuid(dv.device).empty()) labels += "," + label("uuid", r.device_uuid(dv.device));
      for (std::size_t m = 0; m < r.device_metrics.size() && m < dv.values.size(); ++m) {
        const MetricInfo& info = r.device_metrics[m];
        e.add(info.name, info.kind, info.unit, info.help, labels + own_label(info.label), sample(info.unit, dv.values[m]));
      }
    }
  }
  return e.text();
}

}  // namespace uvmpool::stats
