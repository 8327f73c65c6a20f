// The hooks: uvmpool's own version of each driver function the list marks Hook. Each is a few lines
// that count the call and hand it to the backend (backend.h). Three routes lead here: the dlsym
// override, cuGetProcAddress, and the exported symbols (see routes in docs/architecture.md).
#pragma once

#include "driver/driver_api.h"

#define UVMPOOL_IF_Hook(...) __VA_ARGS__
#define UVMPOOL_IF_Pass(...)

namespace uvmpool::hooks {

namespace impl {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  UVMPOOL_IF_##kind(CUresult CUDAAPI symbol params;)
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace impl

// The hooks in list order: a pointer for each Hook entry, nullptr for each Pass entry.
const driver::Table& hook_table();

// UVMPOOL_DISABLE: every route hands out the driver's own functions and the exported symbols
// forward straight to the driver.
bool disabled();
void set_disabled(bool value);

}  // namespace uvmpool::hooks
