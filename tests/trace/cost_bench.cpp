// uvmpool-trace-cost: what recording costs on the allocation path, per event, for each timestamp
// scheme and TLS model (docs/observability.md quotes it). Not a test: timings depend on the machine.
//   cmake --build build --target uvmpool-trace-cost && build/bin/uvmpool-trace-cost [PAIRS]
// Each variant is the real recorder built as a shared module with other settings (see
// tests/trace/CMakeLists.txt), dlopened here in turn; the raw clock reads are measured alongside.
// The modules are looked for in ../lib beside this program (a build carried to another machine,
// scripts/gpu-pack.sh), else in the build's own lib/. The last line, UVMPOOL_BENCH, is the
// library's own scheme (every 8th event) and what this machine's clocks cost, for the GPU suite.
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
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

// The folder the variants are in: ../lib beside this program when its modules are there.
std::string module_dir() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<std::size_t>(n));
    dir = dir.substr(0, dir.rfind('/')) + "/../lib";
    if (access((dir + "/libuvmpool_trace_cost_every-8.so").c_str(), R_OK) == 0) return dir;
  }
  return UVMPOOL_TRACE_COST_DIR;
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1u << 21;
  std::printf("raw clock reads, ns per call (best of 3 x 10M):\n");
#if defined(__x86_64__)
  const double rdtsc_ns = per_call([] { g_sink = __rdtsc(); });
  std::printf("  %-28s %6.2f\n", "rdtsc", rdtsc_ns);
  std::printf("  %-28s %6.2f\n", "rdtscp", per_call([] { unsigned a; g_sink = __rdtscp(&a); }));
#endif
  const double gettime_ns = per_call([] { g_sink = ns(); });
  std::printf("  %-28s %6.2f\n", "clock_gettime(MONOTONIC)", gettime_ns);
  std::printf("\nrecord() per event, ns (Alloc+Free pairs in bursts of 32K events; best of 3 x %llu pairs):\n",
              static_cast<unsigned long long>(pairs));
  const std::string dir = module_dir();
  double library_ns = -1;  // the "every-8" variant: the scheme the library is built with
  std::string clock = "?";
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
  bool failed = false;
  for (const auto& v : variants) {
    const std::string module = dir + "/libuvmpool_trace_cost_" + (std::string(v[0]) == "off" ? "every-8" : v[0]) + ".so";
    void* handle = dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      std::printf("  %-48s (cannot load: %s)\n", v[1], dlerror());
      failed = true;
      continue;
    }
    auto cost = reinterpret_cast<CostFn>(dlsym(handle, "uvmpool_trace_cost"));
    double best = -1;
    std::uint64_t dropped = 0, d = 0;
    for (int rep = 0; rep < 3 && cost; ++rep) {
      double x = 0;
      if (cost(pairs, std::string(v[0]) != "off", &x, &d) != 0) break;
      best = best < 0 ? x : std::min(best, x);
      dropped += d;
    }
    if (best < 0) {
      std::printf("  %-48s (not measured: the trace did not start, or the module has no entry point)\n", v[1]);
      failed = true;
      continue;
    }
    std::printf("  %-48s %6.2f%s\n", v[1], best, dropped ? "  (events dropped: measurement includes drops)" : "");
    if (std::string(v[0]) == "every-8") {
      library_ns = best;
      // The clock the recorder chose on this machine (clock.cpp: the TSC where it is invariant).
      if (auto source = reinterpret_cast<const char* (*)()>(dlsym(handle, "uvmpool_trace_cost_clock"))) clock = source();
    }
  }
  if (library_ns >= 0) {
    std::printf("UVMPOOL_BENCH trace record: %.2f ns an event as the library records (rdtsc on every 8th); "
#if defined(__x86_64__)
                "rdtsc %.2f ns, "
#endif
                "clock_gettime %.2f ns; the recorder reads %s\n",
                library_ns,
#if defined(__x86_64__)
                rdtsc_ns,
#endif
                gettime_ns, clock.c_str());
  }
  return failed ? 1 : 0;
}
