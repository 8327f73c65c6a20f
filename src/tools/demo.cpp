// uvmpool-demo: the README's main job. A plain driver-API program (it knows nothing of uvmpool):
// allocates device memory in mixed sizes, fills every buffer on the device, verifies every byte on
// the host, frees it, and prints what uvmpool did when it is loaded. Runs on a real GPU or on the
// simulated driver.
//   uvmpool-demo [TOTAL_MIB]   (default 1024)
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "uvmpool/uvmpool.h"

namespace {

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "demo: %s failed: %s (%d)\n", what, name ? name : "?", static_cast<int>(r));
  return false;
}

void print_uvmpool_report() {
  auto version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "uvmpool_version"));
  auto get_stats = reinterpret_cast<int (*)(uvmpool_stats*)>(dlsym(RTLD_DEFAULT, "uvmpool_get_stats"));
  if (version == nullptr || get_stats == nullptr) {
    std::printf("uvmpool is not loaded: run me as LD_PRELOAD=libuvmpool.so uvmpool-demo\n");
    return;
  }
  uvmpool_stats s{};
  s.struct_size = sizeof(s);
  get_stats(&s);
  std::printf("uvmpool %s intercepted %llu allocations (%.0f MiB) and %llu frees "
              "(%llu calls through its exported symbols, %llu hooks via cuGetProcAddress, %llu via dlsym)\n",
              version(), s.allocations, static_cast<double>(s.bytes_allocated) / (1 << 20), s.frees,
              s.calls_via_export, s.resolved_via_getproc, s.resolved_via_dlsym);
  std::printf("the pool served %llu of them (%llu went to the driver); it held at most %.0f MiB for %.0f MiB live\n",
              s.pool_allocations, s.driver_allocations, static_cast<double>(s.pool_peak_held_bytes) / (1 << 20),
              static_cast<double>(s.pool_peak_live_bytes) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  const size_t total_mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  CUdevice dev;
  CUcontext ctx;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  char name[128] = {};
  size_t free_bytes = 0, total_bytes = 0;
  cuDeviceGetName(name, sizeof name, dev);
  if (!ok(cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo")) return 1;
  std::printf("device 0: %s, %.1f GiB total, %.1f GiB free\n", name, total_bytes / 1073741824.0, free_bytes / 1073741824.0);

  // Mixed sizes, as a real program makes them: many small buffers and a few large ones.
  const size_t sizes[] = {256, 4096, 1 << 20, 3 << 20, 64 << 20, 256 << 20};
  std::vector<std::pair<CUdeviceptr, size_t>> buffers;
  size_t allocated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; allocated < total_mib << 20; ++i) {
    const size_t bytes = sizes[i % (sizeof sizes / sizeof sizes[0])];
    CUdeviceptr d = 0;
    if (!ok(cuMemAlloc(&d, bytes), "cuMemAlloc")) return 1;
    // Each buffer gets its own pattern, so a buffer that overlapped another would be caught.
    if (!ok(cuMemsetD32(d, 0x9e3779b9u ^ static_cast<unsigned>(i), bytes / 4), "cuMemsetD32")) return 1;
    buffers.emplace_back(d, bytes);
    allocated += bytes;
  }
  std::vector<unsigned> host;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto [d, bytes] = buffers[i];
    host.resize(bytes / 4);
    if (!ok(cuMemcpyDtoH(host.data(), d, bytes), "cuMemcpyDtoH")) return 1;
    for (size_t w = 0; w < host.size(); ++w)
      if (host[w] != (0x9e3779b9u ^ static_cast<unsigned>(i))) {
        std::fprintf(stderr, "demo: buffer %zu word %zu reads %08x: memory corrupted\n", i, w, host[w]);
        return 1;
      }
  }
  for (const auto& [d, bytes] : buffers)
    if (!ok(cuMemFree(d), "cuMemFree")) return 1;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("allocated, filled and verified %zu buffers, %.0f MiB in all, in %.2f s: every byte correct\n",
              buffers.size(), allocated / 1048576.0, seconds);
  print_uvmpool_report();
  return 0;
}
