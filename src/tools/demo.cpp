// uvmpool-demo: the README's main job, the overcommit demo. A plain driver-API program (it knows
// nothing of uvmpool but its public stats): reads the device limit (cuMemGetInfo's total, which is
// UVMPOOL_DEVICE_LIMIT under uvmpool), allocates three times that in mixed sizes, writes and reads
// every byte on the GPU, verifies it, prints where the bytes lay (device or pinned host memory)
// while the buffers were live, and frees it all. Runs on a real GPU (two small PTX kernels) or on
// the simulated driver, which has no kernels (cuMemsetD32 + cuMemcpyDtoD, verified on the host).
//   uvmpool-demo [TOTAL_MIB]   (default: 3x the device limit under uvmpool; without uvmpool, half
//                               of the free device memory up to 4 GiB, since the device is the limit)
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "uvmpool/uvmpool.h"

namespace {

// Word i of buffer `seed` is pattern(seed, i). The kernels below compute the same function:
//   fill:  p[i] = pattern(seed, i)                         for every i < n
//   check: *bad += number of i < n with p[i] != pattern(seed, i)
// Hand-written PTX for sm_52 and later (the driver compiles it for the GPU at hand); it is what
//   __global__ void fill(unsigned* p, size_t n, unsigned seed) {
//     for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
//       p[i] = pattern(seed, i);
//   }
// compiles to, and check is the same loop counting mismatches, with one atomic add per thread.
std::uint32_t pattern(std::uint32_t seed, std::uint64_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9e3779b1u + seed;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  return x ^ (x >> 13);
}

constexpr char kPtx[] = R"ptx(
.version 6.0
.target sm_52
.address_size 64
.visible .entry uvmpool_demo_fill(.param .u64 fill_p, .param .u64 fill_n, .param .u32 fill_seed)
{
  .reg .pred %p;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [fill_p];
  ld.param.u64 %rd2, [fill_n];
  ld.param.u32 %r1, [fill_seed];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mul.wide.u32 %rd3, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  add.u64 %rd3, %rd3, %rd4;
  mov.u32 %r2, %nctaid.x;
  mul.wide.u32 %rd5, %r2, %r3;
  setp.ge.u64 %p, %rd3, %rd2;
  @%p bra FILL_DONE;
FILL_LOOP:
  cvt.u32.u64 %r5, %rd3;
  mad.lo.u32 %r5, %r5, 0x9e3779b1, %r1;
  shr.u32 %r6, %r5, 16;
  xor.b32 %r5, %r5, %r6;
  mul.lo.u32 %r5, %r5, 0x85ebca6b;
  shr.u32 %r6, %r5, 13;
  xor.b32 %r5, %r5, %r6;
  shl.b64 %rd6, %rd3, 2;
  add.u64 %rd7, %rd1, %rd6;
  st.global.u32 [%rd7], %r5;
  add.u64 %rd3, %rd3, %rd5;
  setp.lt.u64 %p, %rd3, %rd2;
  @%p bra FILL_LOOP;
FILL_DONE:
  ret;
}
.visible .entry uvmpool_demo_check(.param .u64 check_p, .param .u64 check_n, .param .u32 check_seed,
                                   .param .u64 check_bad)
{
  .reg .pred %p;
  .reg .b32 %r<8>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [check_p];
  ld.param.u64 %rd2, [check_n];
  ld.param.u32 %r1, [check_seed];
  ld.param.u64 %rd8, [check_bad];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd8, %rd8;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mul.wide.u32 %rd3, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  add.u64 %rd3, %rd3, %rd4;
  mov.u32 %r2, %nctaid.x;
  mul.wide.u32 %rd5, %r2, %r3;
  mov.u64 %rd9, 0;
  setp.ge.u64 %p, %rd3, %rd2;
  @%p bra CHECK_DONE;
CHECK_LOOP:
  cvt.u32.u64 %r5, %rd3;
  mad.lo.u32 %r5, %r5, 0x9e3779b1, %r1;
  shr.u32 %r6, %r5, 16;
  xor.b32 %r5, %r5, %r6;
  mul.lo.u32 %r5, %r5, 0x85ebca6b;
  shr.u32 %r6, %r5, 13;
  xor.b32 %r5, %r5, %r6;
  shl.b64 %rd6, %rd3, 2;
  add.u64 %rd7, %rd1, %rd6;
  ld.global.u32 %r7, [%rd7];
  setp.ne.u32 %p, %r7, %r5;
  @%p add.u64 %rd9, %rd9, 1;
  add.u64 %rd3, %rd3, %rd5;
  setp.lt.u64 %p, %rd3, %rd2;
  @%p bra CHECK_LOOP;
CHECK_DONE:
  setp.eq.u64 %p, %rd9, 0;
  @%p bra CHECK_RET;
  atom.global.add.u64 %rd4, [%rd8], %rd9;
CHECK_RET:
  ret;
}
)ptx";

constexpr double kMiB = 1 << 20;

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "demo: %s failed: %s (%d)\n", what, name ? name : "?", static_cast<int>(r));
  return false;
}

// uvmpool's public API, looked up at run time: present when preloaded or as the drop-in driver.
struct Uvmpool {
  const char* (*version)() = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "uvmpool_version"));
  int (*get)(uvmpool_stats*) = reinterpret_cast<int (*)(uvmpool_stats*)>(dlsym(RTLD_DEFAULT, "uvmpool_get_stats"));
  bool loaded() const { return version != nullptr && get != nullptr; }
  uvmpool_stats stats() const {
    uvmpool_stats s{};
    s.struct_size = sizeof s;
    if (loaded()) get(&s);
    return s;
  }
};

// The kernels, reached by name: the simulated driver has no cuModuleLoadData, and a program linked
// against it must not call a function it lacks.
struct Kernels {
  using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
  Launch launch = nullptr;
  CUfunction fill = nullptr, check = nullptr;

  bool load() {
    auto load_data = reinterpret_cast<CUresult (*)(CUmodule*, const void*)>(dlsym(RTLD_DEFAULT, "cuModuleLoadData"));
    auto get = reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(dlsym(RTLD_DEFAULT, "cuModuleGetFunction"));
    launch = reinterpret_cast<Launch>(dlsym(RTLD_DEFAULT, "cuLaunchKernel"));
    CUmodule module = nullptr;
    return load_data != nullptr && get != nullptr && launch != nullptr && load_data(&module, kPtx) == CUDA_SUCCESS &&
           get(&fill, module, "uvmpool_demo_fill") == CUDA_SUCCESS && get(&check, module, "uvmpool_demo_check") == CUDA_SUCCESS;
  }
  CUresult run(CUfunction f, CUdeviceptr p, std::size_t words, std::uint32_t seed, CUdeviceptr bad) const {
    void* args[] = {&p, &words, &seed, &bad};
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>((words + 255) / 256, 4096));
    return launch(f, blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr);
  }
};

struct Buffer {
  CUdeviceptr ptr;
  std::size_t bytes;
  std::uint32_t seed;
};

// Without kernels: every 1 MiB block of a buffer gets pattern(seed, block) with cuMemsetD32, then the
// first half of the buffer is copied over its second half on the device. What each word must read:
std::uint32_t expected_without_kernels(const Buffer& b, std::size_t word) {
  const std::size_t n = b.bytes / 4, h = n / 2;
  if (word >= n - h) word -= n - h;
  return pattern(b.seed, word * 4 >> 20);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  CUdevice dev;
  CUcontext ctx;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  const Uvmpool uvmpool;
  char name[128] = {};
  std::size_t free_bytes = 0, limit = 0;
  cuDeviceGetName(name, sizeof name, dev);
  if (!ok(cuMemGetInfo(&free_bytes, &limit), "cuMemGetInfo")) return 1;
  std::printf("device 0: %s; cuMemGetInfo: %.0f MiB total%s, %.0f MiB free\n", name, limit / kMiB,
              uvmpool.loaded() ? " (the device limit uvmpool enforces)" : "", free_bytes / kMiB);

  // How much to allocate: 3x the limit under uvmpool (the overcommit; capped at the limit plus 40%
  // of the machine's memory, since UVMPOOL_HOST_LIMIT is 50% by default), else what the device has.
  std::size_t total = 3 * limit;
  if (argc > 1) {
    total = std::strtoull(argv[1], nullptr, 10) << 20;
  } else if (uvmpool.loaded()) {
    const std::size_t ram = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    total = std::min(total, limit + ram / 10 * 4);
  } else {
    total = std::min<std::size_t>(free_bytes / 2, 4ull << 30);
    std::printf("uvmpool is not loaded: the device's memory is the limit, so allocating half of the free memory, "
                "4 GiB at most (run me as LD_PRELOAD=libuvmpool.so UVMPOOL_DEVICE_LIMIT=4G uvmpool-demo to overcommit)\n");
  }
  Kernels kernels;
  const bool gpu = kernels.load();
  const char* const of_what = uvmpool.loaded() ? "the device limit" : "the device's memory";
  std::printf("allocating %.0f MiB (%.1fx %s) in mixed sizes; computing with %s\n", total / kMiB,
              static_cast<double>(total) / limit, of_what,
              gpu ? "two PTX kernels (write every word, then read and check every word)"
                  : "cuMemsetD32 + cuMemcpyDtoD, verified with cuMemcpyDtoH (no kernels: the simulated driver)");

  CUdeviceptr bad = 0;  // the check kernel's mismatch counter
  if (gpu && (!ok(cuMemAlloc(&bad, 8), "cuMemAlloc") || !ok(cuMemsetD32(bad, 0, 2), "cuMemsetD32"))) return 1;
  // Mixed sizes, as a real program makes them: many small buffers, some medium, a few large.
  const std::size_t sizes[] = {256,      4096,      1000 * 256, 512,       65536,     3 << 20, 768, 12288,
                               1 << 20,  256 << 10, 5 << 20,    (100 << 20) + 4096, 2048, 64 << 20, 8192, 512 << 20};
  std::vector<Buffer> buffers;
  std::size_t allocated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; allocated < total; ++i) {
    const std::size_t bytes = std::min(sizes[i % std::size(sizes)], (total - allocated + 255) / 256 * 256);
    CUdeviceptr d = 0;
    if (const CUresult r = cuMemAlloc(&d, bytes); r != CUDA_SUCCESS) {
      ok(r, "cuMemAlloc");
      std::printf("FAILED: allocation %zu (%zu bytes) was refused after %.0f MiB in %zu buffers, %.1fx %s.\n", i,
                  bytes, allocated / kMiB, buffers.size(), static_cast<double>(allocated) / limit, of_what);
      if (!uvmpool.loaded())
        std::printf("Without uvmpool the device's memory is the limit: pass a smaller TOTAL_MIB, or preload uvmpool.\n");
      else if (const uvmpool_stats s = uvmpool.stats(); r == CUDA_ERROR_OUT_OF_MEMORY && s.pool_live_host_bytes != 0)
        std::printf("uvmpool %s spilled %.0f MiB to pinned host memory, then ran out of that too: UVMPOOL_HOST_LIMIT "
                    "(now %.0f MiB pinned) or the machine's memory is reached.\n",
                    uvmpool.version(), s.pool_live_host_bytes / kMiB, s.pool_host_held_bytes / kMiB);
      else if (r == CUDA_ERROR_OUT_OF_MEMORY)
        std::printf("uvmpool %s did not spill past the device limit: this build has no spill yet, UVMPOOL_SPILL=0, "
                    "or no pinned host memory could be had (UVMPOOL_HOST_LIMIT).\n", uvmpool.version());
      for (const Buffer& b : buffers) cuMemFree(b.ptr);
      return 1;
    }
    buffers.push_back({d, bytes, 0x2545f491u * static_cast<std::uint32_t>(i + 1)});
    allocated += bytes;
  }
  const double alloc_s = seconds_since(start);
  std::size_t biggest = 0;
  for (const Buffer& b : buffers) biggest = std::max(biggest, b.bytes);

  // Compute: write every byte, then read every byte, on the device.
  const auto compute_start = std::chrono::steady_clock::now();
  for (const Buffer& b : buffers) {
    if (gpu) {
      if (!ok(kernels.run(kernels.fill, b.ptr, b.bytes / 4, b.seed, bad), "cuLaunchKernel(fill)")) return 1;
      continue;
    }
    for (std::size_t off = 0; off < b.bytes; off += 1 << 20)
      if (!ok(cuMemsetD32(b.ptr + off, pattern(b.seed, off >> 20), (std::min<std::size_t>(b.bytes - off, 1 << 20)) / 4),
              "cuMemsetD32"))
        return 1;
    const std::size_t n = b.bytes / 4, h = n / 2;
    if (h != 0 && !ok(cuMemcpyDtoD(b.ptr + (n - h) * 4, b.ptr, h * 4), "cuMemcpyDtoD")) return 1;
  }
  for (const Buffer& b : buffers)
    if (gpu && !ok(kernels.run(kernels.check, b.ptr, b.bytes / 4, b.seed, bad), "cuLaunchKernel(check)")) return 1;
  if (!ok(cuCtxSynchronize(), "cuCtxSynchronize")) return 1;
  const double compute_s = seconds_since(compute_start);

  // Verify: the kernels' count of wrong words, and a few words of each buffer read back here (so the
  // kernels are checked against this file's pattern()); without kernels, every word read back here.
  const uvmpool_stats live = uvmpool.stats();
  std::vector<std::uint32_t> host(gpu ? 0 : std::min<std::size_t>(biggest, 64 << 20) / 4);
  unsigned long long wrong = 0;
  if (gpu && !ok(cuMemcpyDtoH(&wrong, bad, 8), "cuMemcpyDtoH")) return 1;
  for (const Buffer& b : buffers) {
    const std::size_t n = b.bytes / 4;
    if (gpu) {
      for (const std::size_t w : {std::size_t{0}, n / 2, n - 1}) {
        std::uint32_t v = 0;
        if (!ok(cuMemcpyDtoH(&v, b.ptr + w * 4, 4), "cuMemcpyDtoH")) return 1;
        wrong += v != pattern(b.seed, w);
      }
      continue;
    }
    for (std::size_t w0 = 0; w0 < n; w0 += host.size()) {
      const std::size_t count = std::min(host.size(), n - w0);
      if (!ok(cuMemcpyDtoH(host.data(), b.ptr + w0 * 4, count * 4), "cuMemcpyDtoH")) return 1;
      for (std::size_t w = 0; w < count; ++w) wrong += host[w] != expected_without_kernels(b, w0 + w);
    }
  }
  const double verify_s = seconds_since(compute_start) - compute_s;

  if (uvmpool.loaded()) {
    const unsigned long long on_host = live.pool_live_host_bytes, on_device = live.pool_live_bytes - on_host;
    std::printf("tier split while live: %.0f MiB on the device, %.0f MiB in pinned host memory "
                "(%llu allocations spilled; the pool holds %.0f MiB of pinned host memory)\n",
                on_device / kMiB, on_host / kMiB, live.pool_spilled_allocations, live.pool_host_held_bytes / kMiB);
  }
  const auto free_start = std::chrono::steady_clock::now();
  for (const Buffer& b : buffers)
    if (!ok(cuMemFree(b.ptr), "cuMemFree")) return 1;
  if (bad != 0) cuMemFree(bad);
  const double free_s = seconds_since(free_start);
  std::printf("%zu buffers, %.0f MiB: allocated in %.2f s, %s in %.2f s (%.1f GB/s), verified in %.2f s, freed in %.2f s\n",
              buffers.size(), allocated / kMiB, alloc_s, gpu ? "written and read on the GPU" : "filled and copied",
              compute_s, 2.0 * allocated / compute_s / 1e9, verify_s, free_s);
  if (wrong != 0) {
    std::printf("FAILED: %llu words read back wrong: memory corrupted\n", wrong);
    return 1;
  }
  std::printf("every byte correct (%.1fx %s)\n", static_cast<double>(allocated) / limit, of_what);
  if (!uvmpool.loaded()) return 0;
  const uvmpool_stats s = uvmpool.stats();
  std::printf("uvmpool %s intercepted %llu allocations (%.0f MiB) and %llu frees "
              "(%llu calls through its exported symbols, %llu hooks via cuGetProcAddress, %llu via dlsym)\n",
              uvmpool.version(), s.allocations, s.bytes_allocated / kMiB, s.frees, s.calls_via_export,
              s.resolved_via_getproc, s.resolved_via_dlsym);
  std::printf("the pool served %llu of them (%llu went to the driver); it held at most %.0f MiB in chunks "
              "and %.0f MiB of pinned host memory, for %.0f MiB live at most\n",
              s.pool_allocations, s.driver_allocations, s.pool_peak_held_bytes / kMiB, s.pool_peak_host_held_bytes / kMiB,
              s.pool_peak_live_bytes / kMiB);
  return 0;
}
