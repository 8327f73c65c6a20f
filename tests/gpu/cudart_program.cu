// An nvcc-built program using the CUDA runtime (built once with the default static cudart and once
// with -cudart shared): cudaMalloc, cudaMallocAsync, a kernel that writes every element, a copy back
// and a check. Shows whether its allocations reach uvmpool.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "uvmpool_probe.h"

__global__ void fill(unsigned* p, size_t n, unsigned salt) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<unsigned>(i) * 2654435761u ^ salt;
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                 \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  const size_t n = 64u << 20;  // 256 MiB of unsigned
  unsigned *a = nullptr, *b = nullptr;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMalloc(&a, n * sizeof(unsigned)));
  CHECK(cudaMallocAsync(&b, n * sizeof(unsigned), stream));
  fill<<<1024, 256, 0, stream>>>(a, n, 0x1234u);
  fill<<<1024, 256, 0, stream>>>(b, n, 0x5678u);
  CHECK(cudaStreamSynchronize(stream));
  std::vector<unsigned> host(n);
  for (auto [p, salt] : {std::pair{a, 0x1234u}, std::pair{b, 0x5678u}}) {
    CHECK(cudaMemcpy(host.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i)
      if (host[i] != (static_cast<unsigned>(i) * 2654435761u ^ salt)) {
        std::fprintf(stderr, "element %zu wrong\n", i);
        return 1;
      }
  }
  CHECK(cudaFreeAsync(b, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaFree(a));
  std::printf("cudart program: ok\n");
  uvmpool_probe_print(argc > 1 ? argv[1] : "cudart");
  return 0;
}
