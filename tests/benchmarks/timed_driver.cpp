#include "timed_driver.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>

namespace uvmpool::bench {
namespace {

driver::Table g_real;
driver::Table g_timed;
std::array<std::atomic<std::uint64_t>, driver::kFunctionCount> g_calls{}, g_ns{};

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void add_call_time(driver::Fn fn, std::uint64_t began) {
  const auto i = static_cast<std::size_t>(fn);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
  g_ns[i].fetch_add(now_ns() - began, std::memory_order_relaxed);
}

// One wrapper per entry, named after it (in this namespace, not the driver's).
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  CUresult CUDAAPI symbol params {                                   \
    const std::uint64_t began = now_ns();                            \
    const CUresult r = g_real.symbol args;                           \
    add_call_time(driver::Fn::symbol, began);                        \
    return r;                                                        \
  }
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X

}  // namespace

const driver::Table& timed_driver(const driver::Table& real) {
  g_real = real;
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  g_timed.symbol = real.symbol != nullptr ? &symbol : nullptr;
  UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
  return g_timed;
}

std::vector<CallTime> timed_calls() {
  std::vector<CallTime> out;
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    const std::uint64_t n = g_calls[i].load(std::memory_order_relaxed);
    if (n != 0) out.push_back({driver::kFunctions[i].symbol, n, g_ns[i].load(std::memory_order_relaxed)});
  }
  std::sort(out.begin(), out.end(), [](const CallTime& a, const CallTime& b) { return a.ns > b.ns; });
  return out;
}

void reset_timed_calls() {
  for (std::size_t i = 0; i < driver::kFunctionCount; ++i) {
    g_calls[i].store(0, std::memory_order_relaxed);
    g_ns[i].store(0, std::memory_order_relaxed);
  }
}

std::string describe_timed_calls(std::size_t top, std::uint64_t* total_ns) {
  std::string out;
  std::uint64_t total = 0;
  const std::vector<CallTime> calls = timed_calls();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    total += calls[i].ns;
    if (i >= top) continue;
    char one[160];
    std::snprintf(one, sizeof one, "%s%s %llu (%.2f ms)", out.empty() ? "" : ", ", calls[i].symbol,
                  static_cast<unsigned long long>(calls[i].calls), static_cast<double>(calls[i].ns) / 1e6);
    out += one;
  }
  if (total_ns != nullptr) *total_ns = total;
  return out;
}

}  // namespace uvmpool::bench
