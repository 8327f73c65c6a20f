#include "trace/clock.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

namespace uvmpool::trace::clock {

std::atomic<Source> g_source{Source::Monotonic};

namespace {

[[maybe_unused]] bool cpu_has_invariant_tsc() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    bool constant = false, nonstop = false;
    for (std::string w; words >> w;) {
      constant = constant || w == "constant_tsc";
      nonstop = nonstop || w == "nonstop_tsc";
    }
    return constant && nonstop;  // the first CPU speaks for all
  }
  return false;
}

}  // namespace

Source choose_source() {
  static std::once_flag once;
  std::call_once(once, [] {
    Source s = Source::Monotonic;
#if defined(UVMPOOL_TRACE_FORCE_MONOTONIC)
    // Only the cost benchmark builds this way, to measure clock_gettime on the record path.
#elif defined(__x86_64__)
    if (cpu_has_invariant_tsc()) s = Source::Tsc;
#elif defined(__aarch64__)
    s = Source::Cntvct;
#endif
    g_source.store(s, std::memory_order_relaxed);
  });
  return g_source.load(std::memory_order_relaxed);
}

const char* source_name(Source s) {
  switch (s) {
    case Source::Tsc: return "tsc";
    case Source::Cntvct: return "cntvct_el0";
    case Source::Monotonic: return "clock_gettime";
  }
  return "?";
}

// The tightest of a few (ticks, ns, ticks) readings, so the pair's error is the spread of one
// clock_gettime call (tens of ns), not a preemption that fell between the reads.
Calibration::Pair Calibration::read_pair() {
  Pair best{};
  std::uint64_t best_spread = ~0ull;
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t1 = ticks();
    const std::uint64_t ns = monotonic_ns();
    const std::uint64_t t2 = ticks();
    if (t2 >= t1 && t2 - t1 < best_spread) {
      best_spread = t2 - t1;
      best = {t1 + (t2 - t1) / 2, ns};
    }
  }
  if (best_spread == ~0ull) best = {ticks(), monotonic_ns()};
  return best;
}

void Calibration::begin() {
  identity_ = g_source.load(std::memory_order_relaxed) == Source::Monotonic;
  start_ = read_pair();
  anchor_ = start_;
  rate_ = 1.0;
  refined_ = false;
}

void Calibration::refine() {
  if (identity_) return;
  Pair now = read_pair();
  if (!refined_) {
    // A rate measured over less than a millisecond would be off by tens of ppm; the first drain
    // comes after a few ms anyway, so this wait only matters for a stop() right after start().
    while (now.ns - start_.ns < 1000000) {
      timespec nap{0, 100000};
      nanosleep(&nap, nullptr);
      now = read_pair();
    }
  }
  if (now.tick <= start_.tick || now.ns <= start_.ns) return;  // a broken counter: keep what we have
  const double fit = double(now.ns - start_.ns) / double(now.tick - start_.tick);
  if (!refined_) {
    rate_ = fit;
    anchor_ = start_;
    refined_ = true;
    return;
  }
  // Continue from the current piece, aiming at the long-run fit 100 ms ahead: no jump now, and the
  // small offset the earlier, rougher rates left behind fades instead of adding up.
  const std::uint64_t here = to_ns(now.tick);
  const double horizon = 1e8 / fit;  // ticks in 100 ms
  const double target = double(start_.ns) + (double(now.tick - start_.tick) + horizon) * fit;
  const double rate = (target - double(here)) / horizon;
  anchor_ = {now.tick, here};
  rate_ = rate > fit * 0.5 && rate < fit * 2 ? rate : fit;
}

std::uint64_t Calibration::to_ns(std::uint64_t tick) const {
  if (identity_) return tick;
  const auto delta = static_cast<std::int64_t>(tick - anchor_.tick);
  return anchor_.ns + static_cast<std::int64_t>(std::llround(double(delta) * rate_));
}

}  // namespace uvmpool::trace::clock
