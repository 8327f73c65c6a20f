// What uvmpool has intercepted: relaxed atomic counters, bumped on the hook path, read by
// collect.h (the exit report, live statistics) and the public API.
#pragma once

#include <atomic>
#include <cstdint>

#include "driver/driver_api.h"

namespace uvmpool::stats {

enum class Route : int { dlsym, getproc, exported, kCount };

struct Counters {
  std::atomic<std::uint64_t> hook_calls[driver::kFunctionCount] = {};
  std::atomic<std::uint64_t> routes[static_cast<int>(Route::kCount)] = {};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> bytes_allocated{0};
  std::atomic<std::uint64_t> pool_allocations{0};    // served by the pool
  std::atomic<std::uint64_t> driver_allocations{0};  // handed to the driver (not the pool's to serve)
  std::atomic<std::uint64_t> ipc_opens{0};   // CUDA IPC opens of the pool's memory served to importers
  std::atomic<std::uint64_t> ipc_closes{0};  // of those, ended (closed, or the importer gone) and dealt with
};

Counters& counters();

inline void count_hook(driver::Fn fn) {
  counters().hook_calls[static_cast<int>(fn)].fetch_add(1, std::memory_order_relaxed);
}
inline void count_route(Route route) {
  counters().routes[static_cast<int>(route)].fetch_add(1, std::memory_order_relaxed);
}
inline void count_allocation(std::uint64_t bytes) {
  counters().allocations.fetch_add(1, std::memory_order_relaxed);
  counters().bytes_allocated.fetch_add(bytes, std::memory_order_relaxed);
}
inline void count_served(bool by_pool) {
  (by_pool ? counters().pool_allocations : counters().driver_allocations).fetch_add(1, std::memory_order_relaxed);
}
inline void count_free() { counters().frees.fetch_add(1, std::memory_order_relaxed); }
inline void count_ipc_open() { counters().ipc_opens.fetch_add(1, std::memory_order_relaxed); }
inline void count_ipc_close() { counters().ipc_closes.fetch_add(1, std::memory_order_relaxed); }

// Calls of one hooked symbol, or of every variant of a base name.
std::uint64_t hook_calls(const char* function);

}  // namespace uvmpool::stats
