// A kernel node's parameters in the CUDA 12 form (CUDA_KERNEL_NODE_PARAMS, _v2), from CUDA 11's (_v1:
// no CUkernel, no context) and from the generic node's (_v3, the same fields as _v2 under another
// name), for the node hooks (src/hooks/graph_node_hooks.cpp), tiering's reading of a node and the
// simulated driver, which all take the CUDA 12 form.
#pragma once

#include "driver/driver_api.h"

namespace uvmpool::driver {

inline CUDA_KERNEL_NODE_PARAMS kernel_node_params(const CUDA_KERNEL_NODE_PARAMS_v1& p) {
  return {p.func,      p.gridDimX,  p.gridDimY,  p.gridDimZ,      p.blockDimX, p.blockDimY,
          p.blockDimZ, p.sharedMemBytes, p.kernelParams, p.extra, nullptr,     nullptr};
}

inline CUDA_KERNEL_NODE_PARAMS kernel_node_params(const CUDA_KERNEL_NODE_PARAMS_v3& p) {
  return {p.func,      p.gridDimX,  p.gridDimY,  p.gridDimZ,      p.blockDimX, p.blockDimY,
          p.blockDimZ, p.sharedMemBytes, p.kernelParams, p.extra, p.kern,      p.ctx};
}

}  // namespace uvmpool::driver
