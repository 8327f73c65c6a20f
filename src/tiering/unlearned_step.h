// Said once when tiering does not learn the program's step, or loses it (docs/tiering.md, "Frees that
// reach the pool"): the policy plans from a launch sequence that repeats on the same addresses
// (policy.h), and a program whose allocations land elsewhere from step to step does not show one.
// Then nothing is planned: placement stays first-come and spilled memory is read in place, which a
// user should hear about rather than find in a step time.
//
// Measured on an H200 (docs/gpu-results.md, thirty-seventh session): GPT-2-medium training at
// save_on_cpu's memory (scoreboard row 4b) ran 2.3-4.0 s a step with PyTorch's caching allocator,
// whose blocks keep their addresses, against 6.0-7.5 s with PYTORCH_CUDA_ALLOC_CONF=
// backend:cudaMallocAsync and 4.8-5.1 s with PYTORCH_NO_CUDA_MEMORY_CACHING=1, where every tensor's
// free reaches the pool and its next allocation may get another block; no period was learned in
// either. Modeled the same way: uvmpool-bench-tiering --workloads=freeing.
#pragma once

#include <cstdint>
#include <string>

namespace uvmpool::tiering {

// Launches shown to the policy (each one made while pool memory lay in host memory) with no period
// held, before the warning: about six steps of row 4b's 2500 launches, where the policy
// learns the step in its second or third.
inline constexpr std::uint64_t kUnlearnedStepLaunches = 16384;

// The warning's text: `launches` shown with no period held, `dropped` whether one had been learned
// before. `alloc_conf`, `no_caching`: PyTorch's PYTORCH_CUDA_ALLOC_CONF and
// PYTORCH_NO_CUDA_MEMORY_CACHING as the process has them (nullptr: unset), named when they are what
// makes the frees reach the pool.
std::string unlearned_step_warning(std::uint64_t launches, bool dropped, const char* alloc_conf, const char* no_caching);

}  // namespace uvmpool::tiering
