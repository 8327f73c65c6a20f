#include "sim/clock.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace uvmpool::sim::clock {
namespace {

using driver::Fn;

// Every live thread's clock, so that lowest() and reset_all() can see them. Clocks are atomics only
// so that those two may read them from another thread; each thread alone writes its own.
struct Registry {
  std::mutex mutex;
  std::vector<std::atomic<std::uint64_t>*> clocks;  // guarded by mutex
  std::atomic<std::uint64_t> latest{0};             // the highest clock any thread has reached
  std::atomic<std::uint64_t> horizon{0};            // see now()
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed: threads may exit after main
  return *instance;
}

struct ThreadClock {
  std::atomic<std::uint64_t> ns;
  ThreadClock() : ns(registry().latest.load(std::memory_order_relaxed)) {
    std::lock_guard lock(registry().mutex);
    registry().clocks.push_back(&ns);
  }
  ~ThreadClock() {
    std::lock_guard lock(registry().mutex);
    std::erase(registry().clocks, &ns);
  }
};

std::atomic<std::uint64_t>& mine() {
  thread_local ThreadClock clock;
  return clock.ns;
}

void raise(std::atomic<std::uint64_t>& value, std::uint64_t t) {
  std::uint64_t seen = value.load(std::memory_order_relaxed);
  while (seen < t && !value.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
  }
}

void set(std::uint64_t t) {
  mine().store(t, std::memory_order_relaxed);
  raise(registry().latest, t);
}

}  // namespace

std::uint64_t now() {
  const std::uint64_t own = mine().load(std::memory_order_relaxed);
  const std::uint64_t horizon = registry().horizon.load(std::memory_order_relaxed);
  if (own >= horizon) return own;
  set(horizon);
  return horizon;
}

namespace {
thread_local std::uint64_t t_spent = 0;  // see spent()
}  // namespace

void charge(std::uint64_t ns) {
  if (ns == 0) return;
  t_spent += ns;
  set(now() + ns);
}

void wait_until(std::uint64_t t) {
  if (const std::uint64_t own = now(); t > own) {
    t_spent += t - own;
    set(t);
  }
  raise(registry().horizon, t);
}

std::uint64_t spent() { return t_spent; }

void observed(std::uint64_t t) { raise(registry().horizon, t); }

std::uint64_t lowest() {
  std::lock_guard lock(registry().mutex);
  std::uint64_t low = registry().latest.load(std::memory_order_relaxed);
  for (const auto* clock : registry().clocks) low = std::min(low, clock->load(std::memory_order_relaxed));
  return low;
}

void reset_all() {
  std::lock_guard lock(registry().mutex);
  for (auto* clock : registry().clocks) clock->store(0, std::memory_order_relaxed);
  registry().latest.store(0, std::memory_order_relaxed);
  registry().horizon.store(0, std::memory_order_relaxed);
}

// Stream and event calls, submissions of copies and memsets, module calls: the plain call cost.
// Launches cost a launch. Memory-management calls charge by what they do (memory.cpp, vmm.cpp);
// pure queries (attributes, the current context, error names, proc addresses) cost nothing.
std::uint64_t base_cost(Fn fn) {
  const Costs& c = costs();
  switch (fn) {
    case Fn::cuLaunchKernel:
    case Fn::cuLaunchKernel_ptsz:
    case Fn::cuLaunchKernelEx:
    case Fn::cuLaunchKernelEx_ptsz:
    case Fn::cuLaunchCooperativeKernel:
    case Fn::cuLaunchCooperativeKernel_ptsz:
      return c.launch_ns;
    case Fn::cuStreamCreate:
    case Fn::cuStreamCreateWithPriority:
    case Fn::cuStreamDestroy_v2:
    case Fn::cuStreamSynchronize:
    case Fn::cuStreamSynchronize_ptsz:
    case Fn::cuStreamWaitEvent:
    case Fn::cuStreamWaitEvent_ptsz:
    case Fn::cuEventCreate:
    case Fn::cuEventDestroy_v2:
    case Fn::cuEventRecord:
    case Fn::cuEventRecord_ptsz:
    case Fn::cuEventSynchronize:
    case Fn::cuEventElapsedTime_v2:
    case Fn::cuCtxSynchronize:
    case Fn::cuLaunchHostFunc:
    case Fn::cuLaunchHostFunc_ptsz:
    case Fn::cuStreamWaitValue32_v2:
    case Fn::cuStreamWaitValue32_v2_ptsz:
    case Fn::cuStreamWaitValue64_v2:
    case Fn::cuStreamWaitValue64_v2_ptsz:
    case Fn::cuStreamWriteValue32_v2:
    case Fn::cuStreamWriteValue32_v2_ptsz:
    case Fn::cuStreamWriteValue64_v2:
    case Fn::cuStreamWriteValue64_v2_ptsz:
    case Fn::cuStreamBatchMemOp_v2:
    case Fn::cuStreamBatchMemOp_v2_ptsz:
    case Fn::cuMemcpy:
    case Fn::cuMemcpy_ptds:
    case Fn::cuMemcpyHtoD_v2:
    case Fn::cuMemcpyHtoD_v2_ptds:
    case Fn::cuMemcpyDtoH_v2:
    case Fn::cuMemcpyDtoH_v2_ptds:
    case Fn::cuMemcpyDtoD_v2:
    case Fn::cuMemcpyDtoD_v2_ptds:
    case Fn::cuMemcpyDtoA_v2:
    case Fn::cuMemcpyDtoA_v2_ptds:
    case Fn::cuMemcpyAtoD_v2:
    case Fn::cuMemcpyAtoD_v2_ptds:
    case Fn::cuMemcpyAsync:
    case Fn::cuMemcpyAsync_ptsz:
    case Fn::cuMemcpyHtoDAsync_v2:
    case Fn::cuMemcpyHtoDAsync_v2_ptsz:
    case Fn::cuMemcpyDtoHAsync_v2:
    case Fn::cuMemcpyDtoHAsync_v2_ptsz:
    case Fn::cuMemcpyDtoDAsync_v2:
    case Fn::cuMemcpyDtoDAsync_v2_ptsz:
    case Fn::cuMemsetD8_v2:
    case Fn::cuMemsetD8_v2_ptds:
    case Fn::cuMemsetD16_v2:
    case Fn::cuMemsetD16_v2_ptds:
    case Fn::cuMemsetD32_v2:
    case Fn::cuMemsetD32_v2_ptds:
    case Fn::cuMemsetD8Async:
    case Fn::cuMemsetD8Async_ptsz:
    case Fn::cuMemsetD16Async:
    case Fn::cuMemsetD16Async_ptsz:
    case Fn::cuMemsetD32Async:
    case Fn::cuMemsetD32Async_ptsz:
    case Fn::cuMemAllocAsync:
    case Fn::cuMemAllocAsync_ptsz:
    case Fn::cuMemFreeAsync:
    case Fn::cuMemFreeAsync_ptsz:
    case Fn::cuMemAllocFromPoolAsync:
    case Fn::cuMemAllocFromPoolAsync_ptsz:
    case Fn::cuModuleLoadData:
    case Fn::cuModuleLoadDataEx:
    case Fn::cuModuleUnload:
    case Fn::cuLibraryLoadData:
    case Fn::cuLibraryUnload:
    case Fn::cuMemGetInfo_v2:
      return c.call_ns;
    case Fn::cuStreamQuery:
    case Fn::cuStreamQuery_ptsz:
    case Fn::cuEventQuery:
      return c.query_ns;
    default:
      return 0;
  }
}

}  // namespace uvmpool::sim::clock
