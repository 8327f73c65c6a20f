// uvmpool-trace-cost: what recording costs on the allocation path, per event, for each timestamp
// scheme and TLS model (docs/observability.md quotes it). Not a test: timings depend on the machine.
//   cmake --build build --target uvmpool-trace-cost && build/bin/uvmpool-trace-cost [PAIRS]
// Each variant is the real recorder built as a shared module with other settings (see
// tests/trace/CMakeLists.txt), dlopened here in turn; the raw clock reads are measured alongside.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace {

using CostFn = int (*)(std::uint64_t, int, double*, std::uint64_t*);

std::uint64_t ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::uint64_t(t.tv_sec) * 1000000000u + std::uint64_t(t.tv_nsec);
}

template <typename F>
double per_call(F&& f) {
  constexpr int kN = 10'000'000;
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    const std::uint64_t t0 = ns();
    for (int i = 0; i < kN; ++i) f();
    best = std::min(best, double(ns() - t0) / kN);
  }
  return best;
}

volatile std::uint64_t g_sink;

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1u << 21;
  std::printf("raw clock reads, ns per call (best of 3 x 10M):\n");
#if defined(__x86_64__)
  std::printf("  %-28s %6.2f\n", "rdtsc", per_call([] { g_sink = __rdtsc(); }));
  std::printf("  %-28s %6.2f\n", "rdtscp", per_call([] { unsigned a; g_sink = __rdtscp(&a); }));
#endif
  std::printf("  %-28s %6.2f\n", "clock_gettime(MONOTONIC)", per_call([] { g_sink = ns(); }));
  std::printf("\nrecord() per event, ns (Alloc+Free pairs in bursts of 32K events; best of 3 x %llu pairs):\n",
              static_cast<unsigned long long>(pairs));
  const std::string dir = UVMPOOL_TRACE_COST_DIR;
  const char* variants[][2] = {
      {"off", "recording off (the inline check only)"},
      {"every", "rdtsc on every event"},
      {"every-gettime", "clock_gettime on every event"},
      {"every-4", "rdtsc on every 4th event + after each drain"},
      {"every-8", "rdtsc on every 8th event + after each drain"},
      {"every-16", "rdtsc on every 16th event + after each drain"},
      {"drain-only", "rdtsc only after each drain"},
      {"every-8-default-tls", "every 8th, TLS default model (__tls_get_addr)"},
      {"every-8-tlsdesc", "every 8th, TLS default model, -mtls-dialect=gnu2"},
  };
  for (const auto& v : variants) {
    const std::string module = dir + "/libuvmpool_trace_cost_" + (std::string(v[0]) == "off" ? "every-8" : v[0]) + ".so";
    void* handle = dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      std::printf("  %-48s (cannot load: %s)\n", v[1], dlerror());
      continue;
    }
    auto cost = reinterpret_cast<CostFn>(dlsym(handle, "uvmpool_trace_cost"));
    double best = 1e9;
    std::uint64_t dropped = 0, d = 0;
    for (int rep = 0; rep < 3 && cost; ++rep) {
      double x = 0;
      if (cost(pairs, std::string(v[0]) != "off", &x, &d) != 0) break;
      best = std::min(best, x);
      dropped += d;
    }
    std::printf("  %-48s %6.2f%s\n", v[1], best, dropped ? "  (events dropped: measurement includes drops)" : "");
  }
  return 0;
}
