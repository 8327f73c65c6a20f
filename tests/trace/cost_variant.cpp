// One variant of the recorder for the cost benchmark (cost_bench.cpp): this file is compiled into a
// shared module together with src/trace/*.cpp under the variant's settings (timestamp scheme, TLS
// model), so the benchmark measures the real record path as it runs inside a shared library.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
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

// Events lost to a full ring (what would make the producer's path the drop path), not to the file's
// bound, which the writer enforces on its own side.
std::uint64_t ring_drops() {
  std::uint64_t n = 0;
  for (auto* r : uvmpool::trace::detail::registry_snapshot()) n += r->dropped.load();
  return n;
}

}  // namespace

// Records `pairs` Alloc+Free pairs (recording on, or after stop() when `on` is 0, which measures
// the disabled path); returns 0 and the mean cost of one event, or non-zero when the trace failed.
extern "C" __attribute__((visibility("default"))) int uvmpool_trace_cost(std::uint64_t pairs, int on, double* ns_per_event,
                                                                         std::uint64_t* dropped) {
  using namespace uvmpool::trace;
  // A real file, since the trace refuses anything else (config/output_file.cpp), bounded so that the
  // runs do not fill the disk: past the bound the writer still drains the rings, and drops.
  static int run = 0;
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("uvmpool-trace-cost-" + std::to_string(getpid()) + "-" + std::to_string(run++) + ".json")).string();
  const bool started = start(file, 64ull << 20, nullptr);
  std::filesystem::remove(file);  // the writer keeps its descriptor; nothing is left behind
  if (!started) return 1;
  const std::uint64_t drops_before = ring_drops();
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
  *dropped = ring_drops() - drops_before;
  stop();
  *ns_per_event = double(total) / double(2 * measured);
  return 0;
}

// The clock this module's recorder reads on this machine.
extern "C" __attribute__((visibility("default"))) const char* uvmpool_trace_cost_clock() {
  return uvmpool::trace::clock::source_name(uvmpool::trace::clock::choose_source());
}
