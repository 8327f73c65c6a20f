// What the clients linked with -lcuda share: device 0's primary context, made current.
#pragma once

#include <cuda.h>

#include "client_common.h"

inline CUcontext use_primary_context() {
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  return ctx;
}
