// The work of a kernel launch, a host function or stream memory operations, for the graphs
// (graphs.cpp): a graph's node holds what its stream call would have submitted, checked as that call is.
#pragma once

#include <vector>

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

// The work of a batch of stream memory operations (cuStreamBatchMemOp, a graph's memory-operation
// node), one piece per wait or write, in order; barriers and flushes are checked and give none. The
// whole batch is checked before any of it is made: INVALID_VALUE for a null array, more than
// driver::kMaxBatchMemOps, an unknown operation, bad flags, or an address a wait or write cannot
// reach. A count of 0 is no work, whatever the array (the H200's driver takes it so; given a null
// array with a count, its stream call crashes and its node calls answer INVALID_VALUE, as here).
CUresult mem_op_work(unsigned count, const CUstreamBatchMemOpParams* ops, std::vector<WorkSpec>* out);

// A context destroyed (or a primary context released for the last time, or reset): the modules
// loaded in it go, with their functions, and libraries' functions made for it, as on a GPU. Their
// handles answer CUDA_ERROR_INVALID_HANDLE from then on.
void release_context_modules(const Context* context);

}  // namespace uvmpool::sim
