// A kernel of the catalog (tests/benchmarks/kernels), loaded into the current context for the clients
// linked with -lcuda: the simulator answers its own catalog for its module image; a real driver
// refuses that image (not PTX, not ELF) and gets the committed PTX instead.
#pragma once

#include <cuda.h>

#include "kernels/catalog_ptx.h"
#include "linked_client.h"

inline CUfunction catalog_kernel(const char* name) {
  CUmodule module = nullptr;
  if (cuModuleLoadData(&module, "uvmpool-sim-module 1\n") != CUDA_SUCCESS) CU(cuModuleLoadData(&module, uvmpool::bench::kCatalogPtx));
  CUfunction f = nullptr;
  CU(cuModuleGetFunction(&f, module, name));
  return f;
}
