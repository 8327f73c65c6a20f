// Kernels of uvmpool-bench-bandwidth. Compiled to PTX (compute_90) by scripts/gen_kernels_ptx.sh
// into bandwidth_ptx.h, which is committed: building uvmpool never needs nvcc, and the driver
// compiles the PTX for whatever GPU it runs on.
//
// Grid-stride loops over 16-byte words, four independent accesses per thread per trip so enough
// loads are in flight to reach HBM bandwidth. extern "C" keeps the names cuModuleGetFunction uses.
#include <cstddef>

extern "C" __global__ void read_bytes(const uint4* __restrict__ data, size_t words, unsigned* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < words; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride], d = data[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < words; i += stride) {
    const uint4 a = data[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  // A store that depends on every load, taken almost never, so the loads cannot be dropped.
  if (acc == 0x9e3779b9u) *sink = acc;
}

extern "C" __global__ void write_bytes(uint4* __restrict__ data, size_t words, unsigned value) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint4 v = make_uint4(value, value ^ 1u, value ^ 2u, value ^ 3u);
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < words; i += 4 * stride) {
    data[i] = v;
    data[i + stride] = v;
    data[i + 2 * stride] = v;
    data[i + 3 * stride] = v;
  }
  for (; i < words; i += stride) data[i] = v;
}
