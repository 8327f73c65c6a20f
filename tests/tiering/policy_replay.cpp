// uvmpool-policy-replay: replays a launch sequence recorded on a GPU (scripts/uvmpool-launches.py
// writes one from a trace) on the tiering policy in a fake world (fake_world.h: the device memory
// the pool gave the job, moves made at once), and prints what the policy learned and when, and per
// window of launches what the launches found where. A bound on what the policy can do, not a figure
// of a GPU: no mover, no clock.
//
//   uvmpool-policy-replay FILE.launches [--every=N]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fake_world.h"

namespace {

using uvmpool::tiering::Policy;
using uvmpool::tiering::PolicyStats;
using uvmpool::tiering::testing::read_launches;
using uvmpool::tiering::testing::Recorded;
using uvmpool::tiering::testing::RecordedWorld;

unsigned long long u(std::uint64_t v) { return static_cast<unsigned long long>(v); }
double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1u << 30); }

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::size_t every = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--every=", 0) == 0) {
      char* end = nullptr;
      every = std::strtoul(arg.c_str() + 8, &end, 10);
      if (every == 0 || *end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: --every wants a positive number of launches, not '%s'\n", arg.c_str() + 8);
        return 2;
      }
    } else if (path.empty() && arg.rfind("--", 0) != 0) {
      path = arg;
    } else {
      std::fprintf(stderr, "usage: uvmpool-policy-replay FILE.launches [--every=N]\n");
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: uvmpool-policy-replay FILE.launches [--every=N]\n");
    return 2;
  }
  const Recorded r = read_launches(path);
  if (r.launches.empty()) {
    std::fprintf(stderr, "uvmpool-policy-replay: no launches read from '%s' (missing, or not written by scripts/uvmpool-launches.py)\n", path.c_str());
    return 1;
  }
  RecordedWorld rw(r);
  Policy p(rw.world);
  std::printf("%zu launches over %zu buffers, %.2f GiB on the device at first touch\n", r.launches.size(), r.buffers.size(),
              gib(RecordedWorld::device_bytes(r)));
  std::uint64_t period = 0;
  for (std::size_t i = 0; i < r.launches.size(); ++i) {
    rw.launch(p, r.launches[i]);
    const PolicyStats& s = p.stats();
    if (s.period != period) {
      period = s.period;
      std::printf("launch %zu: period %llu (learned %llu, dropped %llu, taken anew %llu)\n", i, u(period), u(s.periods_learned),
                  u(s.periods_dropped), u(s.periods_retaken));
    }
    if ((i + 1) % every == 0 || i + 1 == r.launches.size()) {
      const auto& w = rw.world;
      std::printf("  to launch %zu: %llu touches on the device, %llu in host memory (%.2f GiB read in place); moved %.2f GiB in, %.2f GiB out; taken anew %llu\n",
                  i + 1, u(w.hits), u(w.misses), gib(w.in_place), gib(w.promoted), gib(w.demoted), u(s.periods_retaken));
      rw.world.reset_counts();
    }
  }
  const PolicyStats& s = p.stats();
  std::printf("end: period %llu; learned %llu, dropped %llu, taken anew %llu\n", u(s.period), u(s.periods_learned),
              u(s.periods_dropped), u(s.periods_retaken));
  return 0;
}
