// Three formats of a Report: the human table (the exit report on stderr, uvmpool-stat PID), JSON
// (UVMPOOL_STATS_FILE, uvmpool-stat --json) and the Prometheus text exposition format 0.0.4
// (uvmpool-stat --prometheus). Every format skips a metric the report lacks, so a reader shows what
// an older or newer writer published.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stats/report.h"

namespace uvmpool::stats {

// The table: every line ends in '\n' and, with `prefix`, starts with "[uvmpool] ".
std::string format_table(const Report& report, bool prefix = true);

// {"pid", "command", "version", "start_unix_s", "updated_unix_s", "uptime_s", "exited",
//  "process": {name: value, labelled: {label value: value}}, "devices": [{"device": N, ...}],
//  "units": {name: unit}}. to_json is the same, pretty-printed with a final newline.
nlohmann::json to_json_value(const Report& report);
std::string to_json(const Report& report);

// Every report's metrics as Prometheus families uvmpool_<name> (counters end in _total), labelled
// pid, program (the basename of argv[0]), device for device metrics, and the metric's own label; plus
// uvmpool_up (0 once exited) and uvmpool_start_time_seconds per process.
std::string to_prometheus(const std::vector<Report>& reports);

// Pieces the formats share with uvmpool-stat.
std::string format_size(std::uint64_t bytes);  // binary units: "0 B", "512 MiB", "3.4 GiB"
std::string format_duration(double seconds);   // "12.3 s", "4 min 05 s", "2 h 07 min", "3 d 04 h"
std::string program_name(const std::string& command);  // basename of the first word
double uptime_s(const Report& report);          // updated - start, never negative

}  // namespace uvmpool::stats
