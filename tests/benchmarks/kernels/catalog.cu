// The simulated driver's kernel catalog (src/sim/sim_control.h) written for a real GPU, with the same
// names, C signatures and parameter layouts, so one program can load the simulator's image or this
// module's PTX and launch the same kernels on either driver (uvmpool-sim-calibrate compares their
// times). Compiled to PTX (compute_90) by scripts/gen_kernels_ptx.sh into catalog_ptx.h, committed:
// building uvmpool never needs nvcc. extern "C" keeps the names cuModuleGetFunction uses.
#include <cstddef>
#include <cstdint>

#include "sim/sim_control.h"  // UvmpoolSimStructFill: the by-value struct, one layout for both drivers

static_assert(sizeof(UvmpoolSimStructFill) == 48 && alignof(UvmpoolSimStructFill) == 8, "catalog layout: 0:48");

namespace {

__device__ size_t first_index() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ size_t grid_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

__device__ void fill(uint32_t* dst, uint64_t count, uint32_t value) {
  for (size_t i = first_index(); i < count; i += grid_stride()) dst[i] = value;
}

// The bytes of [p, p + bytes) before the first 16-byte boundary, capped at `bytes`.
__device__ uint64_t head_bytes(const void* p, uint64_t bytes) {
  const uint64_t head = (16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15;
  return head < bytes ? head : bytes;
}

}  // namespace

extern "C" __global__ void uvmpool_fill_u32(uint32_t* dst, uint64_t count, uint32_t value) {
  fill(dst, count, value);
}

// memmove. Disjoint ranges: every thread of the grid copies (16 bytes at a time when both ends are
// 16-aligned). Overlapping ones: block 0 alone, one block-sized piece at a time in the safe direction,
// each piece read whole into registers before any of it is written.
extern "C" __global__ void uvmpool_copy(void* dst, const void* src, uint64_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d == s || bytes == 0) return;
  const bool overlap = d < s + bytes && s < d + bytes;
  if (!overlap) {
    uint64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) & 15) == 0) {
      done = bytes & ~uint64_t{15};
      for (size_t i = first_index(); i < done / 16; i += grid_stride())
        reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
    }
    for (size_t i = done + first_index(); i < bytes; i += grid_stride()) d[i] = s[i];
    return;
  }
  if (blockIdx.x != 0) return;
  const uint64_t piece = blockDim.x;
  const uint64_t pieces = (bytes + piece - 1) / piece;
  for (uint64_t k = 0; k < pieces; ++k) {
    // Forward when dst is below src (a piece's writes land only where earlier pieces read), else backward.
    const uint64_t start = d < s ? k * piece : (pieces - 1 - k) * piece;
    const uint64_t i = start + threadIdx.x;
    unsigned char v = 0;
    if (i < bytes) v = s[i];
    __syncthreads();
    if (i < bytes) d[i] = v;
    __syncthreads();
  }
}

// Launched with one block (the catalog says so); other blocks, if any, do nothing, so *out stays right.
extern "C" __global__ void uvmpool_sum_u32(const uint32_t* src, uint64_t count, uint64_t* out) {
  if (blockIdx.x != 0) return;
  uint64_t sum = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += src[i];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  __shared__ uint64_t warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
    for (unsigned w = 0; w < warps; ++w) total += warp_sums[w];
    *out = total;
  }
}

// Grid-stride over 16-byte words, four independent accesses per thread per trip (as bandwidth.cu),
// so it reaches HBM bandwidth; unaligned head and tail bytes one at a time. The empty asm with a
// memory clobber between passes keeps the compiler from merging passes (repeated loads or stores of
// the same addresses), and the read sum goes to a volatile shared store, which the compiler must keep,
// so no load can be dropped and global memory is never written by a read.
extern "C" __global__ void uvmpool_touch(const void* p, uint64_t bytes, uint32_t passes, uint32_t write) {
  const auto* base = static_cast<const unsigned char*>(p);
  const uint64_t head = head_bytes(p, bytes);
  const uint64_t words = (bytes - head) / 16;
  const uint64_t tail = head + words * 16;
  const size_t stride = grid_stride();
  const auto* vec = reinterpret_cast<const uint4*>(base + head);
  if (write != 0) {
    auto* out = const_cast<unsigned char*>(base);
    auto* vout = const_cast<uint4*>(vec);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (uint32_t pass = 0; pass < passes; ++pass) {
      size_t i = first_index();
      for (; i + 3 * stride < words; i += 4 * stride) {
        vout[i] = zero;
        vout[i + stride] = zero;
        vout[i + 2 * stride] = zero;
        vout[i + 3 * stride] = zero;
      }
      for (; i < words; i += stride) vout[i] = zero;
      for (size_t j = first_index(); j < head; j += stride) out[j] = 0;
      for (size_t j = tail + first_index(); j < bytes; j += stride) out[j] = 0;
      asm volatile("" ::: "memory");
    }
    return;
  }
  uint32_t sum = 0;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    size_t i = first_index();
    for (; i + 3 * stride < words; i += 4 * stride) {
      const uint4 a = vec[i], b = vec[i + stride], c = vec[i + 2 * stride], d = vec[i + 3 * stride];
      sum += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < words; i += stride) {
      const uint4 a = vec[i];
      sum += a.x + a.y + a.z + a.w;
    }
    for (size_t j = first_index(); j < head; j += stride) sum += base[j];
    for (size_t j = tail + first_index(); j < bytes; j += stride) sum += base[j];
    asm volatile("" ::: "memory");
  }
  __shared__ volatile uint32_t sink;
  sink = sum;
}

extern "C" __global__ void uvmpool_gather_u32(const uint32_t* const* rows, uint64_t row_count, uint64_t row_len,
                                              uint32_t* out) {
  if (row_len == 0) return;
  const uint64_t total = row_count * row_len;
  for (size_t i = first_index(); i < total; i += grid_stride()) out[i] = rows[i / row_len][i % row_len];
}

extern "C" __global__ void uvmpool_struct_fill_u32(UvmpoolSimStructFill arg) {
  for (uint32_t* dst : arg.p)
    if (dst != nullptr) fill(dst, arg.count, arg.value);
}
