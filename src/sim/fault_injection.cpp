// Call counts, the modeled host time spent in each entry point, and injected failures, per entry of
// the list. Failures come from uvmpool_sim_fail() and from UVMPOOL_SIM_FAIL ("FUNC:N[:CODE],...",
// armed before the first call is counted, so N counts from load).
#include "sim/fault_injection.h"

#include <atomic>
#include <bitset>
#include <charconv>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "config/log.h"
#include "sim/errors.h"
#include "sim/settings.h"
#include "sim/sim_control.h"

namespace uvmpool::sim {
namespace {

using driver::kFunctionCount;
using driver::kFunctions;
using FunctionSet = std::bitset<kFunctionCount>;

struct Failure {
  FunctionSet functions;  // a call of any of these counts down
  unsigned remaining;     // the call that brings it to 0 fails
  CUresult code;
};

struct State {
  std::atomic<unsigned long long> counts[kFunctionCount] = {};
  std::atomic<unsigned long long> modeled_ns[kFunctionCount] = {};  // the calls' own modeled time (on_return)
  std::mutex mutex;
  std::vector<Failure> failures;  // guarded by mutex
  std::atomic<bool> any_armed{false};
  std::once_flag environment_armed;
};

State& state() {
  static State* const instance = new State;  // never destroyed: calls may come during exit
  return *instance;
}

// A base name means all its variants; otherwise an exported symbol means itself.
FunctionSet functions_named(std::string_view name) {
  FunctionSet set;
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    if (name == kFunctions[i].base) set.set(i);
  if (set.none())
    for (std::size_t i = 0; i < kFunctionCount; ++i)
      if (name == kFunctions[i].symbol) set.set(i);
  return set;
}

void arm(const FunctionSet& functions, unsigned nth, CUresult code) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.failures.push_back({functions, nth, code});
  s.any_armed.store(true, std::memory_order_release);
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// One "FUNC:N[:CODE]" item of UVMPOOL_SIM_FAIL; a malformed one is reported and skipped.
void arm_item(std::string_view item) {
  const std::size_t first = item.find(':');
  const std::size_t second = first == std::string_view::npos ? first : item.find(':', first + 1);
  const std::string_view function = trim(item.substr(0, first));
  const std::string_view count = first == std::string_view::npos
                                     ? std::string_view()
                                     : trim(item.substr(first + 1, second - first - 1));
  const std::string_view code_text =
      second == std::string_view::npos ? std::string_view() : trim(item.substr(second + 1));
  const FunctionSet functions = functions_named(function);
  unsigned nth = 0;
  const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), nth);
  std::optional<CUresult> code =
      code_text.empty() ? std::optional(CUDA_ERROR_OUT_OF_MEMORY) : error_from_text(code_text);
  if (functions.none() || ec != std::errc() || end != count.data() + count.size() || nth == 0 || !code) {
    log::warn("UVMPOOL_SIM_FAIL: ignoring '{}' (expected FUNC:N[:CODE] with a driver function, N >= 1 "
              "and CODE a number or a CUresult name)",
              item);
    return;
  }
  arm(functions, nth, *code);
}

void arm_from_environment() {
  std::string_view rest = settings().fail;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) arm_item(item);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
}

void ensure_environment_armed() { std::call_once(state().environment_armed, arm_from_environment); }

}  // namespace

CUresult on_call(driver::Fn fn) noexcept {
  State& s = state();
  const auto index = static_cast<std::size_t>(fn);
  s.counts[index].fetch_add(1, std::memory_order_relaxed);
  ensure_environment_armed();
  if (!s.any_armed.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard lock(s.mutex);
  CUresult result = CUDA_SUCCESS;
  for (auto it = s.failures.begin(); it != s.failures.end();) {
    if (it->functions.test(index) && --it->remaining == 0) {
      if (result == CUDA_SUCCESS) result = it->code;
      it = s.failures.erase(it);
    } else {
      ++it;
    }
  }
  s.any_armed.store(!s.failures.empty(), std::memory_order_release);
  return result;
}

void on_return(driver::Fn fn, std::uint64_t modeled_ns) noexcept {
  state().modeled_ns[static_cast<std::size_t>(fn)].fetch_add(modeled_ns, std::memory_order_relaxed);
}

CallTally tally(driver::Fn fn) noexcept {
  const auto index = static_cast<std::size_t>(fn);
  return {state().counts[index].load(std::memory_order_relaxed),
          state().modeled_ns[index].load(std::memory_order_relaxed)};
}

}  // namespace uvmpool::sim

using namespace uvmpool::sim;

extern "C" __attribute__((visibility("default"))) int uvmpool_sim_fail(const char* function_symbol_or_base,
                                                                       unsigned nth_call_from_now,
                                                                       int cuda_error) {
  ensure_environment_armed();
  if (function_symbol_or_base == nullptr || nth_call_from_now == 0) return -1;
  const FunctionSet functions = functions_named(function_symbol_or_base);
  if (functions.none()) return -1;
  arm(functions, nth_call_from_now, static_cast<CUresult>(cuda_error));
  return 0;
}

namespace {
// One tally (calls or modeled ns) summed over the functions a name means.
unsigned long long sum_for(const char* function, const std::atomic<unsigned long long> (&tally)[kFunctionCount]) {
  ensure_environment_armed();
  if (function == nullptr) return 0;
  const FunctionSet functions = functions_named(function);
  unsigned long long total = 0;
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    if (functions.test(i)) total += tally[i].load(std::memory_order_relaxed);
  return total;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) unsigned long long uvmpool_sim_call_count(
    const char* function) {
  return sum_for(function, state().counts);
}

extern "C" __attribute__((visibility("default"))) unsigned long long uvmpool_sim_call_ns(const char* function) {
  return sum_for(function, state().modeled_ns);
}

extern "C" __attribute__((visibility("default"))) void uvmpool_sim_reset_counts(void) {
  ensure_environment_armed();
  for (auto& count : state().counts) count.store(0, std::memory_order_relaxed);
  for (auto& ns : state().modeled_ns) ns.store(0, std::memory_order_relaxed);
}

extern "C" __attribute__((visibility("default"))) void uvmpool_sim_clear_failures(void) {
  ensure_environment_armed();
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.failures.clear();
  s.any_armed.store(false, std::memory_order_release);
}
