// Call counting (calls and the modeled host time spent in them) and failure injection for every
// exported entry point (see sim_control.h for the control API and UVMPOOL_SIM_FAIL for failures armed
// from the environment).
#pragma once

#include <cstdint>

#include "driver/driver_api.h"

namespace uvmpool::sim {

// Counts a call of `fn`; returns the CUresult an armed failure injects into it, or CUDA_SUCCESS.
CUresult on_call(driver::Fn fn) noexcept;
// A counted call of `fn` returns, having advanced its thread's clock by `modeled_ns` of its own (its
// base cost, what it charged for its work, and any wait for the device: clock::spent).
void on_return(driver::Fn fn, std::uint64_t modeled_ns) noexcept;

struct CallTally {
  unsigned long long calls = 0;
  unsigned long long modeled_ns = 0;
};
// `fn`'s calls and modeled host time since load or the last uvmpool_sim_reset_counts().
CallTally tally(driver::Fn fn) noexcept;

}  // namespace uvmpool::sim
