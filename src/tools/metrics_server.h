// uvmpool-stat --serve [ADDR:]PORT: the Prometheus endpoint. Every scrape of /metrics reads the
// segments of the user's uvmpool processes (every user's when root) and answers them in text format
// 0.0.4 (src/stats/format.h), labelled as docs/observability.md lists.
#pragma once

#include <string>

namespace uvmpool::tools {

struct ServeOptions {
  std::string host = "0.0.0.0";  // every IPv4 address; "::" for every IPv6 one
  int port = 0;                  // 0: any free port (the one chosen is printed)
  bool all_users = false;
  std::string dir;               // where the segments are (/dev/shm)
};

// "PORT", "ADDR:PORT" or "[IPV6]:PORT" into `o`; false and *error when it is none of those.
bool parse_listen_address(const std::string& text, ServeOptions* o, std::string* error);

// Serves until SIGINT or SIGTERM. Prints "uvmpool-stat: serving http://ADDR:PORT/metrics" on stdout
// once listening. Returns the exit status: 0 after a signal, 1 when it cannot listen.
int serve_metrics(const ServeOptions& o);

}  // namespace uvmpool::tools
