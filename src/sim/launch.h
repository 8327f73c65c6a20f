// The work of one kernel launch, for the graphs (graphs.cpp): a graph's kernel node holds what
// cuLaunchKernel would have submitted, checked as a launch is checked.
#pragma once

#include "sim/contexts.h"
#include "sim/timeline.h"

namespace uvmpool::sim {

struct KernelLaunch {
  CUfunction function;  // a CUfunction, or a CUkernel cast to one (the current context's)
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  void** params;  // kernelParams, or
  void** extra;   // the extra form
};

// The work (its arguments copied) of `launch` run in `context`, whose function it must be.
// CUDA_ERROR_INVALID_HANDLE for an unknown function or one of another context, INVALID_VALUE for a
// bad shape or bad arguments.
CUresult kernel_work(const KernelLaunch& launch, const Context* context, WorkSpec* out);

// The work of a host function (cuLaunchHostFunc, a graph's host node); INVALID_VALUE for a null one.
CUresult host_work(CUhostFn fn, void* data, const char* what, WorkSpec* out);

// A context destroyed (or a primary context released for the last time, or reset): the modules
// loaded in it go, with their functions, and libraries' functions made for it, as on a GPU. Their
// handles answer CUDA_ERROR_INVALID_HANDLE from then on.
void release_context_modules(const Context* context);

}  // namespace uvmpool::sim
