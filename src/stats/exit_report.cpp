// The exit report: UVMPOOL_STATS prints the table to stderr, UVMPOOL_STATS_FILE writes the JSON.
// Runs in a library destructor, once exit has begun: figures come from atomics only, no driver call.
#include "stats/exit_report.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "config/options.h"
#include "config/output_file.h"
#include "config/process_info.h"
#include "driver/real_driver.h"
#include "stats/collect.h"
#include "stats/format.h"

namespace uvmpool::stats {

void write_exit_report() {
  const config::Options& o = config::options();
  if (!o.stats && o.stats_file.empty()) return;
  // A process that never reached the driver has nothing to report, and writing would overwrite the
  // program's own file: a `timeout` or shell running it under the same LD_PRELOAD exits after it.
  if (!driver::requested()) return;
  Report r = collect_process();
  r.exited = true;
  if (o.stats) {
    std::fflush(stdout);  // the program's own output first: stdio flushes only after destructors
    std::fputs(format_table(r).c_str(), stderr);
  }
  if (!o.stats_file.empty()) {
    const std::string path = config::expand_pid(o.stats_file);
    const std::string json = to_json(r);
    std::string error;
    const int fd = config::open_output_file(path, config::OutputMode::Truncate, error);
    bool ok = fd >= 0;
    for (std::size_t at = 0; ok && at < json.size();) {
      const ssize_t n = ::write(fd, json.data() + at, json.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = std::strerror(n < 0 ? errno : ENOSPC);
        ok = false;
      } else {
        at += static_cast<std::size_t>(n);
      }
    }
    if (fd >= 0 && ::close(fd) != 0 && ok) {
      error = std::strerror(errno);
      ok = false;
    }
    if (!ok) std::fprintf(stderr, "[uvmpool] UVMPOOL_STATS_FILE: cannot write %s: %s\n", path.c_str(), error.c_str());
  }
}

}  // namespace uvmpool::stats
