// The simulated driver's implementation of every entry of the list, one function per exported symbol,
// named after it (uvmpool::sim::impl::cuMemAlloc_v2 implements cuMemAlloc_v2). exports.cpp defines the
// exported symbols on top of these; a missing definition is a link error (--no-undefined), so the list
// and the simulated driver cannot disagree. Variants of one base may share one behaviour.
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::sim::impl {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) CUresult symbol params;
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace uvmpool::sim::impl

namespace uvmpool::sim {

// The address of the exported function of entry `index` of the list (what cuGetProcAddress hands out).
void* export_address(int index);

}  // namespace uvmpool::sim
