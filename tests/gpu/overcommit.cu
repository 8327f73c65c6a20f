// Overcommit on a real GPU: cudaMalloc of TOTAL_MIB (default 12 GiB) in mixed sizes, which under
// UVMPOOL_DEVICE_LIMIT=4G is three times the limit; kernels write every byte, then read every byte
// and sum it; the sums (computed on the GPU) are compared with sums computed here on the host, and
// every word is also compared on the GPU. Prints one line for scripts/gpu-suite.sh:
//   UVMPOOL_OVERCOMMIT total_mib=... limit_mib=... device_mib=... host_mib=... write_gbs=... OK|FAIL
// Run: LD_PRELOAD=libuvmpool.so UVMPOOL_DEVICE_LIMIT=4G ./overcommit [TOTAL_MIB]
// Buffers are classed by where they lie (every 2 MiB, the location of the physical handle mapped
// there, from cuMemRetainAllocationHandle + cuMemGetAllocationPropertiesFromHandle: device, host, or
// mixed) so that the kernels' bandwidth is reported per tier as well. (cuPointerGetAttribute cannot
// tell: uvmpool answers MEMORY_TYPE = device for the whole allocation, as the program expects.)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "uvmpool_probe.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("UVMPOOL_OVERCOMMIT FAIL %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

__host__ __device__ __forceinline__ unsigned pattern(unsigned seed, unsigned long long i) {
  unsigned x = static_cast<unsigned>(i) * 0x9e3779b1u + seed;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  return x ^ (x >> 13);
}

// 16-byte words; 32-bit word w of a buffer holds pattern(seed, w).
__global__ void fill(uint4* p, size_t n16, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const unsigned long long w = 4 * i;
    p[i] = make_uint4(pattern(seed, w), pattern(seed, w + 1), pattern(seed, w + 2), pattern(seed, w + 3));
  }
}

// out[0] += sum of every 32-bit word, out[1] += words that differ from the pattern.
__global__ void check(const uint4* p, size_t n16, unsigned seed, unsigned long long* out) {
  unsigned long long sum = 0, wrong = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    const unsigned long long w = 4 * i;
    sum += static_cast<unsigned long long>(v.x) + v.y + v.z + v.w;
    wrong += (v.x != pattern(seed, w)) + (v.y != pattern(seed, w + 1)) + (v.z != pattern(seed, w + 2)) +
             (v.w != pattern(seed, w + 3));
  }
  for (int d = 16; d > 0; d /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, d);
    wrong += __shfl_down_sync(0xffffffffu, wrong, d);
  }
  if ((threadIdx.x & 31) == 0) {
    if (sum != 0) atomicAdd(&out[0], sum);
    if (wrong != 0) atomicAdd(&out[1], wrong);
  }
}

namespace {

struct Buffer {
  uint4* ptr;
  size_t bytes;
  unsigned seed;
  int tier;  // 0 device, 1 host, 2 mixed
  unsigned long long expected_sum;
};

const char* const kTierNames[] = {"device", "host", "mixed"};

unsigned blocks_for(size_t n16) { return static_cast<unsigned>(std::min<size_t>((n16 + 255) / 256, 2048)); }

bool stats(uvmpool_stats* s) {
  void* f = dlsym(RTLD_DEFAULT, "uvmpool_get_stats");
  if (f == nullptr)
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) f = dlsym(h, "uvmpool_get_stats");
  *s = uvmpool_stats{};
  s->struct_size = sizeof *s;
  return f != nullptr && reinterpret_cast<int (*)(uvmpool_stats*)>(f)(s) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 12288) << 20;
  CHECK(cudaFree(nullptr));  // makes the context
  size_t free_bytes = 0, limit = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &limit));
  using Retain = CUresult (*)(CUmemGenericAllocationHandle*, void*);
  using Properties = CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
  using Release = CUresult (*)(CUmemGenericAllocationHandle);
  Retain retain = nullptr;
  Properties properties = nullptr;
  Release release = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuMemRetainAllocationHandle", reinterpret_cast<void**>(&retain), 12000,
                                         cudaEnableDefault, &found));
  CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAllocationPropertiesFromHandle", reinterpret_cast<void**>(&properties),
                                         12000, cudaEnableDefault, &found));
  CHECK(cudaGetDriverEntryPointByVersion("cuMemRelease", reinterpret_cast<void**>(&release), 12000, cudaEnableDefault,
                                         &found));
  // Where the memory at p lies: 0 device, 1 host, -1 unknown (not VMM memory: no uvmpool).
  const auto location_of = [&](CUdeviceptr p) {
    CUmemGenericAllocationHandle h = 0;
    if (retain(&h, reinterpret_cast<void*>(p)) != CUDA_SUCCESS) return -1;
    CUmemAllocationProp prop{};
    const CUresult r = properties(&prop, h);
    release(h);
    if (r != CUDA_SUCCESS) return -1;
    return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? 0 : 1;
  };

  // Two counters per buffer, allocated first (so they lie on the device).
  const size_t sizes[] = {256,     4096,      1000 * 256, 512,       65536,              3 << 20, 768,      12288,
                          1 << 20, 256 << 10, 5 << 20,    2048 << 10, (100 << 20) + 4096, 2048,   64 << 20, 512 << 20};
  size_t cycle = 0;
  for (const size_t b : sizes) cycle += b;
  const size_t max_buffers = (total / cycle + 1) * std::size(sizes);
  unsigned long long* counters = nullptr;
  CHECK(cudaMalloc(&counters, max_buffers * 16));
  CHECK(cudaMemset(counters, 0, max_buffers * 16));

  std::vector<Buffer> buffers;
  size_t allocated = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; allocated < total && buffers.size() < max_buffers; ++i) {
    const size_t bytes = std::min(sizes[i % std::size(sizes)], (total - allocated + 255) / 256 * 256);
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      std::printf("UVMPOOL_OVERCOMMIT FAIL cudaMalloc of %zu bytes after %zu MiB in %zu buffers (limit %zu MiB): %s\n",
                  bytes, allocated >> 20, buffers.size(), limit >> 20, cudaGetErrorString(e));
      return 1;
    }
    buffers.push_back({static_cast<uint4*>(p), bytes, 0x2545f491u * static_cast<unsigned>(i + 1), 0, 0});
    allocated += bytes;
  }
  const double alloc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uvmpool_stats live{};
  const bool loaded = stats(&live);

  // Tier of each buffer, from where each 2 MiB of it lies (and its last byte): device, host or mixed.
  size_t tier_bytes[3] = {}, host_bytes_by_attribute = 0;
  for (Buffer& b : buffers) {
    const auto d = reinterpret_cast<CUdeviceptr>(b.ptr);
    bool on_device = false, on_host = false;
    std::vector<size_t> probes;  // the start of each 2 MiB, and the last byte
    for (size_t off = 0; off < b.bytes; off += 2 << 20) probes.push_back(off);
    probes.push_back(b.bytes - 1);
    for (const size_t off : probes) {
      const int where = location_of(d + off);
      if (where < 0) {
        on_device = on_host = true;  // unknown: counted as mixed
        break;
      }
      (where == 1 ? on_host : on_device) = true;
      if (where == 1 && off % (2 << 20) == 0) host_bytes_by_attribute += std::min<size_t>(2 << 20, b.bytes - off);
    }
    b.tier = on_device && on_host ? 2 : on_host ? 1 : 0;
    tier_bytes[b.tier] += b.bytes;
  }

  // Expected sums, on the host (all cores, in pieces of 16M words) while the GPU works.
  struct Piece {
    size_t buffer;
    unsigned long long begin, end, sum;
  };
  std::vector<Piece> pieces;
  for (size_t k = 0; k < buffers.size(); ++k)
    for (unsigned long long w = 0; w < buffers[k].bytes / 4; w += 16 << 20)
      pieces.push_back({k, w, std::min<unsigned long long>(w + (16 << 20), buffers[k].bytes / 4), 0});
  std::atomic<size_t> next_piece{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    workers.emplace_back([&] {
      for (size_t k; (k = next_piece.fetch_add(1)) < pieces.size();) {
        unsigned long long sum = 0;
        const unsigned seed = buffers[pieces[k].buffer].seed;
        for (unsigned long long w = pieces[k].begin; w < pieces[k].end; ++w) sum += pattern(seed, w);
        pieces[k].sum = sum;
      }
    });

  // Kernels, tier by tier: write every byte, then read every byte, timed per tier with events.
  cudaEvent_t ev[8];
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  for (int pass = 0; pass < 2; ++pass) {
    CHECK(cudaEventRecord(ev[pass * 4]));
    for (int tier = 0; tier < 3; ++tier) {
      for (size_t k = 0; k < buffers.size(); ++k) {
        const Buffer& b = buffers[k];
        if (b.tier != tier) continue;
        if (pass == 0)
          fill<<<blocks_for(b.bytes / 16), 256>>>(b.ptr, b.bytes / 16, b.seed);
        else
          check<<<blocks_for(b.bytes / 16), 256>>>(b.ptr, b.bytes / 16, b.seed, counters + 2 * k);
      }
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(ev[pass * 4 + tier + 1]));
    }
  }
  CHECK(cudaDeviceSynchronize());
  float ms[2][3] = {};
  for (int pass = 0; pass < 2; ++pass)
    for (int tier = 0; tier < 3; ++tier) CHECK(cudaEventElapsedTime(&ms[pass][tier], ev[pass * 4 + tier], ev[pass * 4 + tier + 1]));
  std::vector<unsigned long long> results(2 * buffers.size());
  CHECK(cudaMemcpy(results.data(), counters, results.size() * 8, cudaMemcpyDeviceToHost));
  for (auto& w : workers) w.join();
  for (const Piece& p : pieces) buffers[p.buffer].expected_sum += p.sum;

  size_t bad_sums = 0;
  unsigned long long wrong_words = 0;
  for (size_t k = 0; k < buffers.size(); ++k) {
    bad_sums += results[2 * k] != buffers[k].expected_sum;
    wrong_words += results[2 * k + 1];
    if ((results[2 * k] != buffers[k].expected_sum || results[2 * k + 1] != 0) && bad_sums + wrong_words < 20)
      std::fprintf(stderr, "buffer %zu (%zu bytes, %s): sum %llu expected %llu, %llu words wrong\n", k, buffers[k].bytes,
                   kTierNames[buffers[k].tier], results[2 * k], buffers[k].expected_sum, results[2 * k + 1]);
  }

  t0 = std::chrono::steady_clock::now();
  for (const Buffer& b : buffers) CHECK(cudaFree(b.ptr));
  CHECK(cudaFree(counters));
  const double free_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto gbs = [](double bytes, double milliseconds) { return milliseconds > 0 ? bytes / milliseconds / 1e6 : 0.0; };
  const double write_ms = ms[0][0] + ms[0][1] + ms[0][2], read_ms = ms[1][0] + ms[1][1] + ms[1][2];
  const bool ok = bad_sums == 0 && wrong_words == 0;
  for (int tier = 0; tier < 3; ++tier)
    std::printf("%-6s tier: %6zu MiB, write %.2f ms (%.1f GB/s), read %.2f ms (%.1f GB/s)\n", kTierNames[tier],
                tier_bytes[tier] >> 20, ms[0][tier], gbs(tier_bytes[tier], ms[0][tier]), ms[1][tier],
                gbs(tier_bytes[tier], ms[1][tier]));
  uvmpool_probe_print("overcommit");
  std::printf("UVMPOOL_OVERCOMMIT total_mib=%zu limit_mib=%zu ratio=%.2f buffers=%zu loaded=%d device_mib=%llu host_mib=%llu "
              "spilled=%llu host_held_mib=%llu oom=%llu alloc_s=%.2f write_gbs=%.1f read_gbs=%.1f "
              "device_tier_gbs=%.0f/%.0f host_tier_gbs=%.1f/%.1f mixed_mib=%zu attr_host_mib=%zu free_s=%.3f sums_bad=%zu "
              "words_bad=%llu %s\n",
              allocated >> 20, limit >> 20, static_cast<double>(allocated) / limit, buffers.size(), loaded,
              (live.pool_live_bytes - live.pool_live_host_bytes) >> 20, live.pool_live_host_bytes >> 20,
              live.pool_spilled_allocations, live.pool_host_held_bytes >> 20, live.pool_out_of_memory, alloc_s,
              gbs(allocated, write_ms), gbs(allocated, read_ms), gbs(tier_bytes[0], ms[0][0]), gbs(tier_bytes[0], ms[1][0]),
              gbs(tier_bytes[1], ms[0][1]), gbs(tier_bytes[1], ms[1][1]), tier_bytes[2] >> 20, host_bytes_by_attribute >> 20,
              free_s, bad_sums,
              wrong_words, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}
