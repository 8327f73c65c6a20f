// Route (c): the hooks under the driver's own versioned names (cuMemAlloc_v2, ...), for programs
// linked with -lcuda. Preloaded, these come before libcuda.so.1 in symbol lookup; in drop-in mode
// they are the driver's exports. Under UVMPOOL_DISABLE they forward straight to the driver.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"

#define UVMPOOL_EXPORT __attribute__((visibility("default")))

extern "C" {

#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args)                    \
  UVMPOOL_IF_##kind(UVMPOOL_EXPORT CUresult CUDAAPI symbol params {                     \
    if (uvmpool::hooks::disabled()) {                                                   \
      const uvmpool::driver::RealDriver* d = uvmpool::driver::real();                   \
      return d && d->table.symbol ? d->table.symbol args : CUDA_ERROR_NO_DEVICE;        \
    }                                                                                   \
    uvmpool::stats::count_route(uvmpool::stats::Route::exported);                       \
    return uvmpool::hooks::guarded::symbol args;                                         \
  })
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X

}  // extern "C"
