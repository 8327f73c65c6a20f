// The hooks: uvmpool's own version of each driver function the list marks Hook. Each is a few lines
// that count the call and hand it to the backend (backend.h). Three routes lead here: the dlsym
// override, cuGetProcAddress, and the exported symbols (see routes in docs/architecture.md).
#pragma once

#include "driver/driver_api.h"

#define UVMPOOL_IF_Hook(...) __VA_ARGS__
#define UVMPOOL_IF_Pass(...)

namespace uvmpool::hooks {

// The hand-written hooks (memory_hooks.cpp, getproc_hook.cpp). They may throw (std::bad_alloc):
// nothing outside reaches them but through `guarded`.
namespace impl {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  UVMPOOL_IF_##kind(CUresult CUDAAPI symbol params;)
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace impl

// What every route hands out (guarded_hooks.cpp, generated from the list): each calls the impl
// hook of its name, and no C++ exception crosses it. An exception becomes
// CUDA_ERROR_OUT_OF_MEMORY (what a driver answers when it cannot get memory) and one log line.
namespace guarded {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  UVMPOOL_IF_##kind(CUresult CUDAAPI symbol params noexcept;)
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace guarded

// Answers an exception caught at a boundary of uvmpool (a hook or a uvmpool_* function): logs it
// once per process (if the logger can) and returns CUDA_ERROR_OUT_OF_MEMORY. Call only from a catch.
CUresult answer_exception(const char* where) noexcept;

// The hooks in list order (the guarded ones): a pointer for each Hook entry, nullptr for each Pass entry.
const driver::Table& hook_table();

// Whether the routes hand out the hook of list entry `entry` rather than the driver's own function:
// every Hook entry, but tiering's (launches, unloads, stream creation, the copies that may wait on
// the host) only while tiering watches launches (UVMPOOL_TIERING not off), so that with it off a
// launch or a copy costs nothing at all.
bool hands_out(int entry);
// Tiering's hooks (launch_hooks.cpp, host_wait_hooks.cpp, transfer_hooks.cpp, graph_hooks.cpp), and whether
// tiering wants them.
bool is_launch_hook(driver::Fn fn);
bool watches_launches();

// UVMPOOL_DISABLE: every route hands out the driver's own functions and the exported symbols
// forward straight to the driver.
bool disabled();
void set_disabled(bool value);

}  // namespace uvmpool::hooks
