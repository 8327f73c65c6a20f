// The recorder's clock. Producers read raw ticks (the cheapest counter the machine offers); only
// the writer thread turns ticks into nanoseconds of CLOCK_MONOTONIC, so the conversion costs the
// allocation path nothing.
//   x86-64: the TSC (__rdtsc), when /proc/cpuinfo shows constant_tsc and nonstop_tsc (its rate
//           never changes and it keeps counting in deep sleep; Linux keeps it in step across cores).
//   aarch64: the generic timer's virtual count (cntvct_el0), constant by the architecture.
//   else:   clock_gettime(CLOCK_MONOTONIC) itself (ticks are nanoseconds).
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace uvmpool::trace::clock {

enum class Source : std::uint8_t { Monotonic, Tsc, Cntvct };

// Chosen once, by the first start(); relaxed loads on the record path (a predictable branch).
extern std::atomic<Source> g_source;

inline std::uint64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000u + static_cast<std::uint64_t>(t.tv_nsec);
}

inline std::uint64_t ticks() {
#if defined(__x86_64__)
  if (g_source.load(std::memory_order_relaxed) == Source::Tsc) return __rdtsc();
#elif defined(__aarch64__)
  if (g_source.load(std::memory_order_relaxed) == Source::Cntvct) {
    std::uint64_t v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  return monotonic_ns();
}

// Picks the source (first call decides; later calls return the same). Reads /proc/cpuinfo on x86-64.
Source choose_source();
const char* source_name(Source s);

// Ticks -> CLOCK_MONOTONIC nanoseconds, for the writer thread only. The rate is measured against
// CLOCK_MONOTONIC from start() on and refined at every drain (its error shrinks as 1/elapsed).
// Each refinement continues the conversion from where the previous rate left it (piecewise
// linear, continuous), so a better rate never makes timestamps jump or go backwards.
class Calibration {
 public:
  void begin();   // at start(): the first (ticks, ns) pair
  void refine();  // at each drain; waits until 1 ms has passed since begin() on the first call
  std::uint64_t to_ns(std::uint64_t tick) const;
  double ns_per_tick() const { return rate_; }

 private:
  struct Pair {
    std::uint64_t tick, ns;
  };
  static Pair read_pair();

  bool identity_ = true;  // Monotonic source: ticks are nanoseconds
  Pair start_{};          // the pair read at begin()
  Pair anchor_{};         // where the current piece of the conversion starts (tick, converted ns)
  double rate_ = 1.0;     // ns per tick
  bool refined_ = false;
};

}  // namespace uvmpool::trace::clock
