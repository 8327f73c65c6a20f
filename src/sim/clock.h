// The virtual clock's host side: one clock per thread, in virtual nanoseconds, that driver calls
// advance by their modeled cost. Streams, engines and links keep their own times (timeline.h); this
// file knows only threads. A new thread's clock starts where the latest clock of any thread stood, so
// a single-threaded program sees the same times on every run.
#pragma once

#include <cstdint>

#include "driver/driver_api.h"
#include "sim/settings.h"

namespace uvmpool::sim::clock {

// The calling thread's host clock. It is never behind the horizon: the latest end of work that any
// thread waited for or saw complete. A thread can act on what another learned (one thread synchronizes
// and frees, another reuses the memory), so what one thread knows has finished is finished for all.
// In a single-threaded program the horizon never passes the thread's own clock.
std::uint64_t now();
// Advances it by `ns`.
void charge(std::uint64_t ns);
// Moves it forward to `t` if it is behind (a synchronize that waited for work ending at `t`).
void wait_until(std::uint64_t t);
// The calling thread saw work ending at `t` complete (a query): `t` joins the horizon.
void observed(std::uint64_t t);
// What the calling thread's own charges and waits have advanced its clock by, in all: not the jumps
// to the horizon that another thread's wait causes (a call's share of the time, UVMPOOL_SIM_PROFILE).
std::uint64_t spent();
// The lowest clock of the threads alive now: no thread can observe a time before it any more.
std::uint64_t lowest();
// Sets every thread's clock back to 0 (uvmpool_sim_reset_clock).
void reset_all();

// The fixed host cost of `fn` charged by the exported entry point before its implementation runs
// (calls with costs that depend on their arguments charge the rest themselves).
std::uint64_t base_cost(driver::Fn fn);

inline const Costs& costs() { return settings().costs; }

// `bytes` at `gbps` GB/s, in ns (1 GB/s is one byte per ns).
inline std::uint64_t transfer_ns(std::uint64_t bytes, double gbps) {
  return static_cast<std::uint64_t>(static_cast<double>(bytes) / gbps + 0.5);
}
// `bytes` at `ns_per_gib`.
inline std::uint64_t per_gib_ns(std::uint64_t bytes, std::uint64_t ns_per_gib) {
  return static_cast<std::uint64_t>(static_cast<double>(bytes) * static_cast<double>(ns_per_gib) / 1073741824.0);
}

}  // namespace uvmpool::sim::clock
