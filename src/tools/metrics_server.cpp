#include "tools/metrics_server.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <httplib.h>

#include "stats/format.h"
#include "stats/process_labels.h"
#include "stats/shm_reader.h"

namespace uvmpool::tools {
namespace {

using namespace uvmpool::stats;

// A scrape takes milliseconds; anything slower is a client holding a worker. These bound how long
// one can: a request must arrive within kReadTimeout, an idle kept-alive connection is closed after
// kKeepAlive, and kWorkers connections are served at once (Prometheus uses one).
constexpr int kWorkers = 16;
constexpr time_t kReadTimeoutS = 2, kWriteTimeoutS = 5, kKeepAliveS = 2;
constexpr std::size_t kMaxRequestBody = 1024;  // GET has none

std::atomic<bool> g_stop_serving{false};
void on_stop_signal(int) { g_stop_serving.store(true); }

const char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Every live, readable segment's figures. A process that published no Kubernetes labels gets this
// exporter's own (POD_NAME, ...): right for a sidecar in the process's pod, and unset on a node
// exporter, whose environment says nothing about the processes it reads.
std::string scrape(const ServeOptions& o) {
  const auto own_labels = kubernetes_labels();
  std::vector<Report> reports;
  int unreadable = 0;
  for (const SegmentInfo& s : list_segments(o.all_users, o.dir)) {
    if (s.stale()) continue;
    Report r;
    if (!s.readable || !read_segment(s.path, &r, nullptr)) {
      ++unreadable;
      continue;
    }
    if (r.labels.empty()) r.labels = own_labels;
    reports.push_back(std::move(r));
  }
  return to_prometheus(reports) +
         "# HELP uvmpool_exporter_processes Processes whose statistics this scrape read.\n"
         "# TYPE uvmpool_exporter_processes gauge\n"
         "uvmpool_exporter_processes " + std::to_string(reports.size()) + "\n" +
         "# HELP uvmpool_exporter_unreadable_segments Segments of running processes this exporter could not read "
         "(another user's without root, or being set up).\n"
         "# TYPE uvmpool_exporter_unreadable_segments gauge\n"
         "uvmpool_exporter_unreadable_segments " + std::to_string(unreadable) + "\n";
}

bool parse_port(const std::string& text, int* port) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::atoi(text.c_str());
  return *port <= 65535;
}

}  // namespace

bool parse_listen_address(const std::string& text, ServeOptions* o, std::string* error) {
  std::string host = o->host, port = text;
  if (text.starts_with("[")) {  // [IPV6]:PORT
    const std::size_t close = text.find("]:");
    if (close == std::string::npos) {
      *error = "bad address '" + text + "' (an IPv6 address is written [::1]:PORT)";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty() || !parse_port(port, &o->port)) {
    *error = "bad address '" + text + "' (PORT, ADDR:PORT or [IPV6]:PORT, the port from 0 to 65535)";
    return false;
  }
  o->host = host;
  return true;
}

int serve_metrics(const ServeOptions& o) {
  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  server.set_read_timeout(kReadTimeoutS, 0);
  server.set_write_timeout(kWriteTimeoutS, 0);
  server.set_keep_alive_timeout(kKeepAliveS);
  server.set_payload_max_length(kMaxRequestBody);
  // cpp-httplib's default also sets SO_REUSEPORT, which lets a second exporter share the port and
  // take half the scrapes: reuse the address only (a restart need not wait out TIME_WAIT).
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.Get("/metrics", [&o](const httplib::Request&, httplib::Response& res) {
    res.set_content(scrape(o), kContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("uvmpool-stat: the figures are at /metrics\n", "text/plain; charset=utf-8");
  });

  signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-answer must not end the exporter
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  int port = o.port;
  if (port == 0) {
    port = server.bind_to_any_port(o.host);
  } else if (!server.bind_to_port(o.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "uvmpool-stat: cannot listen on %s:%d (in use, or not an address of this machine)\n",
                 o.host.c_str(), o.port);
    return 1;
  }
  const bool v6 = o.host.find(':') != std::string::npos;
  std::printf("uvmpool-stat: serving http://%s%s%s:%d/metrics\n", v6 ? "[" : "", o.host.c_str(), v6 ? "]" : "", port);
  std::fflush(stdout);
  // A signal handler may not call stop(): a thread watches the flag it sets.
  std::thread stopper([&server] {
    while (!g_stop_serving.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.stop();
  });
  server.listen_after_bind();
  const bool stopped_by_signal = g_stop_serving.exchange(true);  // else listening failed on its own
  stopper.join();
  if (!stopped_by_signal) std::fprintf(stderr, "uvmpool-stat: the server stopped listening\n");
  return stopped_by_signal ? 0 : 1;
}

}  // namespace uvmpool::tools
