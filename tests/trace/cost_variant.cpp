// One variant of the recorder for the cost benchmark (cost_bench.cpp): this file is compiled into a
// shared module together with src/trace/*.cpp under the variant's settings (timestamp scheme, TLS
// model), so the benchmark measures the real record path as it runs inside a shared library.
#include <chrono>
#include <thread>

#include "trace/clock.h"
#include "trace/ring.h"
#include "trace/trace.h"

namespace {

std::uint64_t ns() { return uvmpool::trace::clock::monotonic_ns(); }

// Bursts stay under a ring's size and the writer empties the ring between them, so the time
// measured is the record path itself, never the full-ring drop. Spinning (not sleeping) keeps this
// core awake and its caches warm, as in a program that allocates all the time.
void wait_drained() {
  for (;;) {
    bool empty = true;
    for (auto* r : uvmpool::trace::detail::registry_snapshot())
      empty = empty && r->tail.load() == r->head.load();
    if (empty) return;
    std::this_thread::yield();
  }
}

}  // namespace

// Records `pairs` Alloc+Free pairs (recording on, or after stop() when `on` is 0, which measures
// the disabled path); returns 0 and the mean cost of one event, or non-zero when the trace failed.
extern "C" __attribute__((visibility("default"))) int uvmpool_trace_cost(std::uint64_t pairs, int on, double* ns_per_event,
                                                                         std::uint64_t* dropped) {
  using namespace uvmpool::trace;
  if (!start("/dev/null", 1ull << 50, nullptr)) return 1;
  if (!on) stop();
  constexpr std::uint64_t kBurst = 16384;  // pairs: 32K events, half a ring
  std::uint64_t total = 0, measured = 0;
  for (std::uint64_t done = 0, warm = 2 * kBurst; done < pairs + warm;) {
    const std::uint64_t burst = kBurst;
    const std::uint64_t t0 = ns();
    for (std::uint64_t i = 0; i < burst; ++i) {
      const std::uint64_t address = 0x7f0000000000ull + (i << 8);
      record(Kind::Alloc, 0, address, 256);
      record(Kind::Free, 0, address, 256);
    }
    const std::uint64_t t1 = ns();
    if (done >= warm) total += t1 - t0, measured += burst;
    done += burst;
    wait_drained();
  }
  stop();
  *ns_per_event = double(total) / double(2 * measured);
  *dropped = status().dropped;
  return 0;
}
