// Contexts: one primary context per device, created contexts, and each thread's current-context stack.
#pragma once

#include <atomic>

#include "driver/driver_api.h"

namespace uvmpool::sim {

// A context. Never freed, so a stale handle reads as "destroyed" instead of crashing.
struct Context {
  int device = 0;
  bool primary = false;
  // A created context until cuCtxDestroy; a primary context while retained. Memory, streams and
  // events made in a context are freed when it stops being active.
  std::atomic<bool> active{false};
  // CUDA_SUCCESS, or the error a fault left (CUDA_ERROR_ILLEGAL_ADDRESS): sticky, as on a GPU, so
  // nearly every later call made in this context returns it, until the context is destroyed or reset.
  std::atomic<CUresult> sticky{CUDA_SUCCESS};
};

inline CUcontext to_handle(Context* context) { return reinterpret_cast<CUcontext>(context); }

// The context a handle names, or nullptr if the sim never created it.
Context* from_handle(CUcontext handle);

// The calling thread's current context, into *out. CUDA_ERROR_INVALID_CONTEXT when there is none,
// CUDA_ERROR_CONTEXT_IS_DESTROYED when it was destroyed (or is a primary context no longer retained).
CUresult current_context(Context** out);

// Whether a context of `accessor` enabled peer access to a context of `owner` (cuCtxEnablePeerAccess):
// then its kernels reach `owner`'s cuMemAlloc memory. The sim keeps it per device pair, not per
// context. VMM mappings are not affected: they follow cuMemSetAccess alone, as on a GPU.
bool peer_enabled(int accessor, int owner);

}  // namespace uvmpool::sim
