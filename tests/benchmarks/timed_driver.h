// A driver table whose every entry times its call on the host (wall clock) before returning: what a
// replay's time is made of on a GPU, where the simulator's modeled cost of each call
// (uvmpool_sim_call_ns) is not there to read. Built from the one list of driver functions
// (driver_functions.inc), so every entry the pool may call is timed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "driver/driver_api.h"

namespace uvmpool::bench {

// The timed table over `real`, which is kept and called through. One per process: a second call
// replaces the first's `real`.
const driver::Table& timed_driver(const driver::Table& real);

struct CallTime {
  const char* symbol;
  std::uint64_t calls = 0;
  std::uint64_t ns = 0;
};
// The entries called since the last reset, most time first.
std::vector<CallTime> timed_calls();
void reset_timed_calls();
// The first `top` of timed_calls() as "symbol calls (ms), ...", and their total in ns.
std::string describe_timed_calls(std::size_t top, std::uint64_t* total_ns = nullptr);

}  // namespace uvmpool::bench
