// The exit report: UVMPOOL_STATS prints the table to stderr, UVMPOOL_STATS_FILE writes the JSON.
// Runs in a library destructor, once exit has begun: figures come from atomics only, no driver call.
#include "stats/exit_report.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "config/options.h"
#include "config/process_info.h"
#include "stats/collect.h"
#include "stats/format.h"

namespace uvmpool::stats {

void write_exit_report() {
  const config::Options& o = config::options();
  if (!o.stats && o.stats_file.empty()) return;
  Report r = collect_process();
  r.exited = true;
  if (o.stats) {
    std::fflush(stdout);  // the program's own output first: stdio flushes only after destructors
    std::fputs(format_table(r).c_str(), stderr);
  }
  if (!o.stats_file.empty()) {
    const std::string path = config::expand_pid(o.stats_file);
    std::FILE* f = std::fopen(path.c_str(), "w");
    const std::string json = to_json(r);
    const bool ok = f != nullptr && std::fwrite(json.data(), 1, json.size(), f) == json.size();
    const int saved = errno;
    if (f != nullptr && std::fclose(f) != 0 && ok) {
      std::fprintf(stderr, "[uvmpool] UVMPOOL_STATS_FILE: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    } else if (!ok) {
      std::fprintf(stderr, "[uvmpool] UVMPOOL_STATS_FILE: cannot write %s: %s\n", path.c_str(), std::strerror(saved));
    }
  }
}

}  // namespace uvmpool::stats
