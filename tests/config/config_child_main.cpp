// A tiny program for the tests that need a fresh process: options() and the logger are set up once
// per process, and options() ends the process on a bad value.
//   config_child options         prints sim_devices=N after options()
//   config_child warnings        calls report_warnings() twice
//   config_child log [COMPONENT] logs one line at each level, shuts logging down, logs once more
#include <cstdio>
#include <cstring>

#include "config/log.h"
#include "config/options.h"

int main(int argc, char** argv) {
  using namespace uvmpool;
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "options") == 0) {
    std::printf("sim_devices=%lld\n", static_cast<long long>(config::options().sim_devices));
    return 0;
  }
  if (std::strcmp(mode, "warnings") == 0) {
    config::report_warnings();
    config::report_warnings();
    return 0;
  }
  if (std::strcmp(mode, "log") == 0) {
    if (argc > 2) log::set_component(argv[2]);
    log::trace("at trace {}", 1);
    log::debug("at debug {}", 2);
    log::info("at info {}", 3);
    log::warn("at warn {}", 4);
    log::error("at error {}", 5);
    log::shutdown();
    log::error("after shutdown");
    return 0;
  }
  std::fprintf(stderr, "usage: config_child options|warnings|log [COMPONENT]\n");
  return 64;
}
