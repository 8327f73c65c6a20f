// Call counting and failure injection for every exported entry point (see sim_control.h for the
// control API and UVMPOOL_SIM_FAIL for failures armed from the environment).
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::sim {

// Counts a call of `fn`; returns the CUresult an armed failure injects into it, or CUDA_SUCCESS.
CUresult on_call(driver::Fn fn) noexcept;

}  // namespace uvmpool::sim
