// Load and exit of both shared objects (libuvmpool.so and the drop-in libcuda.so.1). Loading costs
// a program that never touches CUDA only a read of its UVMPOOL_* variables: the driver is opened on
// the first call that needs it.
#include <cstdio>

#include "config/log.h"
#include "config/options.h"
#include "driver/dl.h"
#include "hooks/hooks.h"
#include "stats/exit_report.h"
#include "stats/publisher.h"

// Defined only in the drop-in libcuda.so.1 (dropin.cpp): fills its forwarding slots.
extern "C" __attribute__((weak, visibility("hidden"))) void uvmpool_dropin_init();

namespace {

__attribute__((constructor)) void uvmpool_load() {
  using namespace uvmpool;
  const config::Options& opts = config::options();  // a malformed value stops the process here
  config::report_warnings();
  driver::prepare_system_dlsym();
  hooks::set_disabled(opts.disable);
  if (opts.disable) log::info("UVMPOOL_DISABLE is set: passing every call to the driver");
  if (uvmpool_dropin_init != nullptr) uvmpool_dropin_init();
  stats::prepare_process_observers();  // exit handlers first, before the program can start threads
}

// Runs once exit has begun: the exit report, from counters only. No driver call and no logger from
// here on (the program's own static destructors may still call hooks; those keep working).
__attribute__((destructor)) void uvmpool_unload() {
  using namespace uvmpool;
  stats::write_exit_report();
  log::shutdown();
}

}  // namespace
