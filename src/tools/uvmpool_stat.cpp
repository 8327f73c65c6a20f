// uvmpool-stat: the live statistics of processes running under uvmpool, read from the segments they
// publish in /dev/shm (src/stats/shm_layout.h). Lists processes, shows one as a table, JSON or
// Prometheus text, once or --watch'ed. Reads only: the one thing it writes is the removal of stale
// segments that the user's own ended processes left behind.
//
// --snapshot runs the converter of src/python/uvmpool/_snapshot.py (installed as
// share/uvmpool/snapshot.py beside bin/) with python3: a PyTorch memory snapshot from a trace.
//
// Arguments are parsed by hand: a dozen flags, one of which (--watch[=SECONDS]) takes its value only
// after '=' so that `--watch 1234` watches pid 1234, and every usage error must exit with status 2.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "stats/format.h"
#include "stats/shm_reader.h"
#include "tools/metrics_server.h"

#ifndef UVMPOOL_VERSION_STRING
#define UVMPOOL_VERSION_STRING "0.0.0"
#endif

namespace {

using namespace uvmpool::stats;

constexpr int kOk = 0, kNoProcess = 1, kUsage = 2;

const char kHelp[] =
    "Usage: uvmpool-stat [OPTIONS] [PID]\n"
    "Shows the live statistics of processes running under uvmpool.\n"
    "\n"
    "  (no PID)           list your processes using uvmpool, with device and host memory in use and held;\n"
    "                     segments left by your processes that have ended are removed\n"
    "  -p, --pid PID      the statistics of one process (or PID alone)\n"
    "  --watch[=SECONDS]  refresh every SECONDS (default 1, fractions allowed) until Ctrl-C, or until the\n"
    "                     watched process ends\n"
    "  --count=N          stop after N refreshes (implies --watch)\n"
    "  --json             JSON: an object for a PID, an array for the list\n"
    "  --prometheus       Prometheus text format (0.0.4) for the PID, or every live process\n"
    "  --all-users        list every user's processes (their segments are readable by root only)\n"
    "  --serve [ADDR:]PORT  serve Prometheus's /metrics over HTTP for every process of the user (every\n"
    "                     user's when root) until Ctrl-C; ADDR defaults to 0.0.0.0, PORT 0 picks a free one\n"
    "  --keep-stale       keep and list the segments of ended processes\n"
    "  --snapshot FILE (PID | TRACE)  write a PyTorch memory snapshot (open it at pytorch.org/memory_viz or\n"
    "                     with torch.cuda._memory_viz) of the running process PID, which must have been\n"
    "                     started with UVMPOOL_TRACE, or of a trace file; needs python3\n"
    "  -h, --help         this text\n"
    "  --version          the version\n"
    "\n"
    "Exit status: 0 ok, 1 no such process or an unreadable segment, 2 bad usage.\n";

struct Options {
  std::optional<long> pid;
  bool watch = false;
  double interval_s = 1.0;
  long count = 0;  // 0: until stopped
  bool json = false, prometheus = false, all_users = false, keep_stale = false;
  std::string dir;  // "": the users' directories under /dev/shm (shm::user_directory)
  std::optional<uvmpool::tools::ServeOptions> serve;
  std::optional<std::string> snapshot_out;  // --snapshot FILE
  std::string snapshot_source;              // its PID or trace file
};

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "uvmpool-stat: %s\nTry 'uvmpool-stat --help'.\n", why.c_str());
  std::exit(kUsage);
}

long parse_positive(const std::string& text, const char* what, long max) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v <= 0 || v > max) {
    usage_error("bad " + std::string(what) + ": '" + text + "'");
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  auto set_pid = [&](const std::string& text) {
    const long pid = parse_positive(text, "pid", 0x7fffffff);
    if (o.pid && *o.pid != pid) usage_error("one PID at a time");
    o.pid = pid;
  };
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    const std::string name = arg.starts_with("--") ? arg.substr(0, eq) : arg;
    const std::optional<std::string> inline_value =
        arg.starts_with("--") && eq != std::string::npos ? std::optional(arg.substr(eq + 1)) : std::nullopt;
    auto value = [&]() -> std::string {  // --name=VALUE or --name VALUE
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) usage_error(name + " needs a value");
      return argv[++i];
    };
    auto no_value = [&]() {
      if (inline_value) usage_error(name + " takes no value");
    };
    if (name == "-h" || name == "--help") {
      no_value();
      std::fputs(kHelp, stdout);
      std::exit(kOk);
    } else if (name == "--version") {
      no_value();
      std::printf("uvmpool-stat (uvmpool) %s\n", UVMPOOL_VERSION_STRING);
      std::exit(kOk);
    } else if (name == "-p" || name == "--pid") {
      set_pid(value());
    } else if (name == "--watch") {
      o.watch = true;
      if (inline_value) {
        char* end = nullptr;
        o.interval_s = std::strtod(inline_value->c_str(), &end);
        if (inline_value->empty() || *end != '\0' || !std::isfinite(o.interval_s) || o.interval_s < 0.01 ||
            o.interval_s > 86400) {
          usage_error("bad --watch interval: '" + *inline_value + "' (seconds, 0.01 to 86400)");
        }
      }
    } else if (name == "--count") {
      o.count = parse_positive(value(), "--count", 1L << 30);
      o.watch = true;
    } else if (name == "--json") {
      no_value();
      o.json = true;
    } else if (name == "--prometheus") {
      no_value();
      o.prometheus = true;
    } else if (name == "--all-users") {
      no_value();
      o.all_users = true;
    } else if (name == "--keep-stale") {
      no_value();
      o.keep_stale = true;
    } else if (name == "--serve") {
      uvmpool::tools::ServeOptions serve;
      std::string why;
      if (!uvmpool::tools::parse_listen_address(value(), &serve, &why)) usage_error(why);
      o.serve = serve;
    } else if (name == "--snapshot") {
      o.snapshot_out = value();
      if (o.snapshot_out->empty()) usage_error("--snapshot needs a file name");
    } else if (name == "--dir") {  // for tests: segments somewhere other than /dev/shm
      o.dir = value();
    } else if (!arg.empty() && arg[0] != '-') {
      positional.push_back(arg);
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (o.snapshot_out) {  // its source: a PID, or a trace file
    if (o.watch || o.json || o.prometheus || o.serve) usage_error("--snapshot takes no --watch, --json, --prometheus or --serve");
    if (positional.size() > 1 || (positional.size() == 1 && o.pid)) usage_error("--snapshot takes one PID or trace file");
    if (positional.empty() && !o.pid) usage_error("--snapshot needs the PID of a process or a trace file");
    o.snapshot_source = o.pid ? std::to_string(*o.pid) : positional.front();
    return o;
  }
  for (const std::string& p : positional) set_pid(p);
  if (o.json && o.prometheus) usage_error("--json and --prometheus exclude each other");
  if (o.serve && (o.pid || o.watch || o.json || o.prometheus)) {
    usage_error("--serve serves every process; it takes no PID, --watch, --json or --prometheus");
  }
  if (o.serve) {
    o.serve->all_users = o.all_users || geteuid() == 0;
    o.serve->dir = o.dir;
  }
  return o;
}

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Snapshot {
  std::string text;    // for stdout
  int status = kOk;
  bool ended = false;  // the watched process has ended: stop watching
};

std::uint64_t sum(const Report& r, const char* name) {
  std::uint64_t total = 0;
  for (std::size_t d = 0; d < r.devices.size(); ++d) total += r.device_value(d, name);
  return total;
}

const char* state_word(const SegmentInfo& s) {
  if (s.stale()) return "ended";
  if (!s.readable) return "unreadable";
  switch (s.state) {
    case shm::State::Starting: return "starting";
    case shm::State::Running: return "running";
    case shm::State::Exited: return "exited";
  }
  return "?";
}

std::string fixed(const std::string& s, int width, bool left = false) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, left ? "%-*s" : "%*s", width, s.c_str());
  return buffer;
}

Snapshot list(const Options& o) {
  Snapshot out;
  std::vector<std::string> removed;
  std::vector<std::pair<SegmentInfo, std::optional<Report>>> shown;
  for (const SegmentInfo& s : list_segments(o.all_users, o.dir)) {
    if (s.stale() && !o.keep_stale && s.uid == geteuid()) {
      if (remove_stale(s)) removed.push_back(std::to_string(s.pid));
      continue;
    }
    std::optional<Report> report;
    Report r;
    std::string error;
    if (s.readable && read_segment(s.path, &r, &error)) report = std::move(r);
    shown.emplace_back(s, std::move(report));
  }
  if (!removed.empty()) {
    std::string pids;
    for (const std::string& p : removed) pids += (pids.empty() ? "" : ", ") + p;
    std::fprintf(stderr, "uvmpool-stat: removed %zu stale segment%s of ended processes (pid %s)\n", removed.size(),
                 removed.size() == 1 ? "" : "s", pids.c_str());
  }
  if (o.prometheus) {
    std::vector<Report> reports;
    for (const auto& [s, r] : shown) {
      if (r && !s.stale()) reports.push_back(*r);
    }
    out.text = to_prometheus(reports);
  } else if (o.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& [s, r] : shown) {
      if (!r) continue;
      nlohmann::json j = to_json_value(*r);
      j["alive"] = !s.stale();
      array.push_back(std::move(j));
    }
    out.text = array.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else if (shown.empty()) {
    const std::string where = !o.dir.empty() ? o.dir
                              : o.all_users  ? std::string(shm::kShmDirectory) + "/" + shm::kNamePrefix + "*"
                                             : shm::user_directory(geteuid());
    out.text = "no process is using uvmpool (no " + where + "/" + shm::kNamePrefix +
               (o.all_users ? std::string("*") : std::to_string(geteuid())) + "-* segments)\n";
  } else {
    // PROMOTED and DEMOTED: bytes tiering moved into and out of device memory; IN PLACE: launches that
    // read host memory over PCIe (docs/tiering.md). "-": a writer without tiering's figures.
    out.text = fixed("PID", 8) + "  " + fixed("STATE", 10, true) + fixed("UPTIME", 11) + fixed("DEV LIVE", 11) +
               fixed("DEV HELD", 11) + fixed("HOST LIVE", 11) + fixed("HOST HELD", 11) + fixed("PROMOTED", 11) +
               fixed("DEMOTED", 11) + fixed("IN PLACE", 10) + "  COMMAND\n";
    for (const auto& [s, r] : shown) {
      std::string line = fixed(std::to_string(s.pid), 8) + "  " + fixed(state_word(s), 10, true);
      if (r) {
        const std::uint64_t live = sum(*r, "live_bytes"), live_host = sum(*r, "live_host_bytes");
        const auto process = [&](const char* name, bool bytes) {
          const std::uint64_t* v = find_process_value(*r, name);
          return v == nullptr ? std::string("-") : bytes ? format_size(*v) : std::to_string(*v);
        };
        line += fixed(format_duration(uptime_s(*r)), 11) + fixed(format_size(live - std::min(live, live_host)), 11) +
                fixed(format_size(sum(*r, "held_bytes")), 11) + fixed(format_size(live_host), 11) +
                fixed(format_size(sum(*r, "host_held_bytes")), 11) + fixed(process("tiering_promoted_bytes", true), 11) +
                fixed(process("tiering_demoted_bytes", true), 11) + fixed(process("launches_in_place", false), 10) +
                "  " + r->command;
      } else {
        line += fixed("-", 11) + fixed("-", 11) + fixed("-", 11) + fixed("-", 11) + fixed("-", 11) + fixed("-", 11) +
                fixed("-", 11) + fixed("-", 10) + "  (" + (s.error.empty() ? "unreadable" : s.error) + ")";
      }
      out.text += line + "\n";
    }
  }
  return out;
}

// The segment of `pid`: the user's own names first, else any user's (to read it as root, or to say
// whose it is). Of several under one pid (another pid namespace's writer of the same pid took the
// first name: shm_layout.h), the one of the process that pid names here, by its start time.
std::optional<SegmentInfo> find_segment(const Options& o, long pid) {
  std::optional<SegmentInfo> own;
  std::uint64_t ticks = 0;
  const bool known = process_start_ticks(pid, &ticks);
  for (unsigned instance = 1; instance <= shm::kMaxInstances; ++instance) {
    char name[64];
    shm::segment_name(name, sizeof name, geteuid(), pid, instance);
    const std::string path = (o.dir.empty() ? shm::user_directory(geteuid()) : o.dir) + "/" + name;
    if (access(path.c_str(), F_OK) != 0) continue;
    SegmentInfo s = inspect_segment(path);
    const bool this_process = known && s.readable && s.start_ticks == ticks;
    if (this_process) return s;
    if (!own) own = std::move(s);
  }
  if (own) return own;
  std::optional<SegmentInfo> found;
  for (SegmentInfo& s : list_segments(true, o.dir)) {
    if (s.pid == pid && (!found || (!s.stale() && found->stale()))) found = std::move(s);
  }
  return found;
}

Snapshot one(const Options& o, bool first) {
  Snapshot out;
  const long pid = *o.pid;
  const std::optional<SegmentInfo> s = find_segment(o, pid);
  Report r;
  std::string error;
  if (!s) {
    if (!first) return {"", kOk, true};
    const std::string where = o.dir.empty() ? std::string(shm::kShmDirectory) + "/" + shm::kNamePrefix + "*" : o.dir;
    std::fprintf(stderr, "uvmpool-stat: no uvmpool process with pid %ld (no %s/%s*-%ld segment)\n", pid, where.c_str(),
                 shm::kNamePrefix, pid);
    return {"", kNoProcess, true};
  }
  if (read_segment(s->path, &r, &error) && r.pid != pid) {
    error = "refused: the segment's header names pid " + std::to_string(r.pid);  // never another process's figures
    r = Report{};
    std::fprintf(stderr, "uvmpool-stat: %s: %s\n", s->path.c_str(), error.c_str());
    return {"", kNoProcess, true};
  }
  if (!error.empty()) {
    if (!first && s->stale()) return {"", kOk, true};  // torn down as it ended
    std::fprintf(stderr, "uvmpool-stat: %s: %s\n", s->path.c_str(), error.c_str());
    return {"", kNoProcess, true};
  }
  if (o.prometheus) {
    out.text = to_prometheus({r});
  } else if (o.json) {
    nlohmann::json j = to_json_value(r);
    j["alive"] = !s->stale();
    out.text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else {
    out.text = format_table(r, false);
  }
  out.ended = s->stale() || r.exited;
  if (out.ended && !o.watch && !r.exited) {
    std::fprintf(stderr, "uvmpool-stat: process %ld has ended; these are the last figures it published\n", pid);
  }
  return out;
}

// --snapshot: runs the converter installed beside this program (share/uvmpool/snapshot.py, from
// src/python/uvmpool/_snapshot.py) with python3; its status is ours (0 ok, 1 unreadable, 2 usage).
int write_snapshot(const Options& o) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string script;
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir.resize(dir.rfind('/'));
    script = dir + "/../share/uvmpool/snapshot.py";
  }
  if (script.empty() || access(script.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "uvmpool-stat: cannot find %s (the snapshot converter is installed beside bin/)\n",
                 script.empty() ? "share/uvmpool/snapshot.py" : script.c_str());
    return kNoProcess;
  }
  std::vector<char*> args{const_cast<char*>("python3"), const_cast<char*>("-B"), script.data(),
                          const_cast<char*>(o.snapshot_out->c_str()), const_cast<char*>(o.snapshot_source.c_str()),
                          nullptr};
  execvp("python3", args.data());
  std::fprintf(stderr, "uvmpool-stat: --snapshot needs python3 on PATH (%s)\n", std::strerror(errno));
  return kNoProcess;
}

// Sleeps in short steps so that Ctrl-C ends a long interval at once.
void sleep_interval(double seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(seconds));
  while (!g_stop && Clock::now() < until) {
    const Clock::duration left = until - Clock::now();
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.serve) return uvmpool::tools::serve_metrics(*o.serve);
  if (o.snapshot_out) return write_snapshot(o);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = isatty(STDOUT_FILENO) == 1;
  for (long n = 1; !g_stop; ++n) {
    const Snapshot snap = o.pid ? one(o, n == 1) : list(o);
    if (!o.watch || (n == 1 && snap.status != kOk)) {
      std::fputs(snap.text.c_str(), stdout);
      return snap.status;
    }
    if (snap.ended && snap.text.empty()) {  // gone: the last figures stay on screen
      std::printf("uvmpool-stat: process %ld has ended\n", *o.pid);
      return kOk;
    }
    if (tty) {
      // Home and clear, then the snapshot: a terminal shows one refreshing screen.
      std::printf("\x1b[H\x1b[2Juvmpool-stat: every %g s (Ctrl-C to stop)\n\n", o.interval_s);
    } else if (n > 1 && !snap.text.empty()) {
      std::fputs("\n", stdout);
    }
    std::fputs(snap.text.c_str(), stdout);
    if (snap.ended) {
      std::printf("uvmpool-stat: process %ld has ended\n", *o.pid);
      std::fflush(stdout);
      return kOk;
    }
    std::fflush(stdout);
    if (o.count != 0 && n >= o.count) break;
    sleep_interval(o.interval_s);
  }
  return kOk;
}
