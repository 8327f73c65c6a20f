// The control API of the virtual clock and the race detector (sim_control.h).
#include "sim/clock.h"
#include "sim/devices.h"
#include "sim/race_detector.h"
#include "sim/sim_control.h"
#include "sim/timeline.h"

using namespace uvmpool::sim;

#define UVMPOOL_SIM_API extern "C" __attribute__((visibility("default")))

UVMPOOL_SIM_API uint64_t uvmpool_sim_now_ns(void) { return clock::now(); }

UVMPOOL_SIM_API void uvmpool_sim_advance_host_ns(uint64_t ns) {
  clock::charge(ns);
  // Host work between calls may have written a value a stream waits for.
  if (initialized()) timeline::pump();
}

UVMPOOL_SIM_API unsigned long long uvmpool_sim_violations(void) { return detector::violations(); }

UVMPOOL_SIM_API unsigned long long uvmpool_sim_link_bytes(int device, int direction) {
  return initialized() ? timeline::link_bytes(device, direction) : 0;
}

UVMPOOL_SIM_API unsigned long long uvmpool_sim_work_count(void) { return timeline::work_count(); }

UVMPOOL_SIM_API void uvmpool_sim_reset_clock(void) {
  if (initialized())
    timeline::reset_clock();
  else
    clock::reset_all();
}
