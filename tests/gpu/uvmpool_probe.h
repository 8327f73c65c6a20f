// Prints one line saying what uvmpool saw in this process, for scripts/gpu-suite.sh to read. The
// public API is found through dlsym: in the global scope when preloaded, else in the loaded
// libcuda.so.1 (drop-in mode). Programs do not link uvmpool.
#pragma once
#include <dlfcn.h>

#include <cstdio>

#include "uvmpool/uvmpool.h"

inline void uvmpool_probe_print(const char* program) {
  void* f = dlsym(RTLD_DEFAULT, "uvmpool_get_stats");
  if (f == nullptr) {
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) f = dlsym(h, "uvmpool_get_stats");
  }
  uvmpool_stats s{};
  s.struct_size = sizeof s;
  const int loaded = f != nullptr && reinterpret_cast<int (*)(uvmpool_stats*)>(f)(&s) == 0;
  std::printf("UVMPOOL_PROBE program=%s loaded=%d allocations=%llu frees=%llu bytes=%llu getproc=%llu dlsym=%llu export=%llu "
              "pool=%llu driver=%llu peak_held=%llu peak_live=%llu\n",
              program, loaded, s.allocations, s.frees, s.bytes_allocated, s.resolved_via_getproc,
              s.resolved_via_dlsym, s.calls_via_export, s.pool_allocations, s.driver_allocations,
              s.pool_peak_held_bytes, s.pool_peak_live_bytes);
}
