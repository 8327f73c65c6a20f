#include "sim/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "config/options.h"
#include "config/output_file.h"
#include "config/process_info.h"
#include "sim/fault_injection.h"

namespace uvmpool::sim::profile {
namespace {

std::string& destination() {
  static std::string* const path = new std::string;  // never destroyed: read by the exit handler
  return *path;
}

void write() {
  struct Row {
    const char* name;
    CallTally tally;
  };
  std::vector<Row> rows;
  unsigned long long total = 0;
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    const CallTally t = tally(static_cast<driver::Fn>(i));
    if (t.calls == 0) continue;
    rows.push_back({driver::kFunctions[i].symbol, t});
    total += t.modeled_ns;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.tally.modeled_ns > b.tally.modeled_ns; });
  const std::string& path = destination();
  std::FILE* out = stderr;
  if (path != "-") {
    // Where uvmpool's other output files are opened (config/output_file.h: no planted links).
    const std::string file = config::expand_pid(path);
    std::string error;
    const int fd = config::open_output_file(file, config::OutputMode::Truncate, error);
    out = fd >= 0 ? fdopen(fd, "w") : nullptr;
    if (out == nullptr) {
      if (fd >= 0) close(fd);
      std::fprintf(stderr, "uvmpool simulated driver: cannot write UVMPOOL_SIM_PROFILE=%s: %s\n", file.c_str(),
                   error.empty() ? "fdopen failed" : error.c_str());
      return;
    }
  }
  std::fprintf(out, "simulated driver profile: MODELED host time inside each entry point, waits included "
                    "(docs/simulator.md)\n");
  std::fprintf(out, "%-40s %10s %14s %10s %7s\n", "entry point", "calls", "modeled us", "us/call", "share");
  for (const Row& r : rows) {
    const double us = static_cast<double>(r.tally.modeled_ns) / 1e3;
    std::fprintf(out, "%-40s %10llu %14.1f %10.2f %6.1f%%\n", r.name, r.tally.calls, us,
                 us / static_cast<double>(r.tally.calls),
                 total == 0 ? 0.0 : 100.0 * static_cast<double>(r.tally.modeled_ns) / static_cast<double>(total));
  }
  std::fprintf(out, "%-40s %10s %14.1f\n", "total", "", static_cast<double>(total) / 1e3);
  if (out != stderr) std::fclose(out);
}

}  // namespace

void arm() {
  static std::once_flag once;
  std::call_once(once, [] {
    destination() = config::options().sim_profile;
    if (!destination().empty()) std::atexit(write);
  });
}

}  // namespace uvmpool::sim::profile
