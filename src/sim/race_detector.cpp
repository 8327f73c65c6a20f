#include "sim/race_detector.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "config/log.h"
#include "sim/clock.h"

namespace uvmpool::sim::detector {
namespace {

// Records of work that may still be unfinished for some thread. Pruned of work that ended before the
// lowest host clock of the live threads (no thread can be behind it any more) whenever the list has
// doubled since the last pruning.
struct State {
  std::mutex mutex;
  std::vector<WorkRecord> records;  // guarded by mutex
  std::size_t prune_at = 1024;      // guarded by mutex
  std::atomic<unsigned long long> violations{0};
  std::atomic<bool> any{false};  // records is not empty
};

State& state() {
  static State* const instance = new State;  // never destroyed: calls may come during exit
  return *instance;
}

constexpr std::size_t kReportedWork = 4;  // work items named per violation; the rest are counted

bool overlaps(const WorkRecord& work, std::uintptr_t first, std::uintptr_t last) {
  return std::any_of(work.ranges.begin(), work.ranges.end(),
                     [&](const auto& r) { return r.first < last && first < r.second; });
}

}  // namespace

void record(WorkRecord work) {
  if (work.ranges.empty()) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.records.size() >= s.prune_at) {
    const std::uint64_t lowest = clock::lowest();
    std::erase_if(s.records, [&](const WorkRecord& r) { return r.end <= lowest; });
    s.any.store(!s.records.empty(), std::memory_order_relaxed);
    s.prune_at = std::max<std::size_t>(1024, 2 * s.records.size());
  }
  s.records.push_back(std::move(work));
  s.any.store(true, std::memory_order_relaxed);
}

bool any_records() { return state().any.load(std::memory_order_relaxed); }

bool check(std::string_view call, std::uintptr_t first, std::uintptr_t last) {
  const std::uint64_t now = clock::now();
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::size_t hits = 0;
  for (const WorkRecord& work : s.records) {
    if (work.end <= now || !overlaps(work, first, last)) continue;
    if (hits == 0)
      log::error("race: {} of [{:#x}, {:#x}) at host time {} ns changes memory that unfinished work touches",
                 call, first, last, now);
    if (hits < kReportedWork)
      log::error("race:   {} on {} (device {}), running [{}, {}) ns", work.what, work.stream, work.device,
                 work.start, work.end);
    ++hits;
    work.context->sticky.store(CUDA_ERROR_ILLEGAL_ADDRESS, std::memory_order_release);
  }
  if (hits == 0) return false;
  if (hits > kReportedWork) log::error("race:   and {} more", hits - kReportedWork);
  s.violations.fetch_add(1, std::memory_order_relaxed);
  return true;
}

unsigned long long violations() { return state().violations.load(std::memory_order_relaxed); }

void reset() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.records.clear();
  s.any.store(false, std::memory_order_relaxed);
  s.prune_at = 1024;
  s.violations.store(0, std::memory_order_relaxed);
}

}  // namespace uvmpool::sim::detector
