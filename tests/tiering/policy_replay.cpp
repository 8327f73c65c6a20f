// uvmpool-policy-replay: replays a launch sequence recorded on a GPU (scripts/uvmpool-launches.py
// writes one from a trace) on the tiering policy in a fake world (fake_world.h: the device memory
// the pool gave the job, moves made at once), and prints what the policy learned and when, and per
// window of launches what the launches found where, against Belady on demand (below) and the bytes
// the window touched beyond what the device holds (what any policy must bring in once, when the window
// repeats). A bound on what the policy can do, not a figure
// of a GPU: no mover, no clock.
//
//   uvmpool-policy-replay FILE.launches [--every=N] [--top=K]
//
// --top=K lists, for the last whole window, the K buffers whose promotions moved the most bytes.
#include <algorithm>
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

// Belady on demand, the comparison: every future use known, a buffer brought in when a launch needs
// it, room made by sending out the buffers used farthest ahead (none the launch uses). With moves made
// at once, what crosses PCIe is then set by the access pattern and the unit moved (a whole allocation),
// not by the policy's foresight.
class BeladyOnDemand {
 public:
  explicit BeladyOnDemand(const Recorded& r) : r_(r), resident_(r.buffers.size()), next_(r.buffers.size(), kNever) {
    for (std::size_t id = 0; id < r.buffers.size(); ++id) {
      resident_[id] = !r.buffers[id].second;
      if (resident_[id]) used_ += r.buffers[id].first;
    }
    capacity_ = used_;
    // For each launch, where each of its buffers is used next.
    std::vector<std::uint64_t> last(r.buffers.size(), kNever);
    next_use_.resize(r.launches.size());
    for (std::size_t t = r.launches.size(); t-- > 0;) {
      for (std::size_t id : r.launches[t].buffers) next_use_[t].push_back(last[id]);
      for (std::size_t id : r.launches[t].buffers) last[id] = t;
    }
  }
  // Launch t: returns nothing; counts the bytes brought in.
  void launch(std::size_t t) {
    const std::vector<std::size_t>& ids = r_.launches[t].buffers;
    for (std::size_t k = 0; k < ids.size(); ++k) next_[ids[k]] = next_use_[t][k];
    for (std::size_t id : ids) {
      if (resident_[id]) continue;
      const std::uint64_t bytes = r_.buffers[id].first;
      while (used_ + bytes > capacity_) {
        std::size_t victim = r_.buffers.size();
        for (std::size_t j = 0; j < resident_.size(); ++j) {
          if (!resident_[j] || std::find(ids.begin(), ids.end(), j) != ids.end()) continue;
          if (victim == r_.buffers.size() || next_[j] > next_[victim]) victim = j;
        }
        if (victim == r_.buffers.size()) break;
        resident_[victim] = false;
        used_ -= r_.buffers[victim].first;
      }
      if (used_ + bytes > capacity_) continue;  // cannot fit beside the launch's others: read in place
      resident_[id] = true;
      used_ += bytes;
      brought_in += bytes;
    }
  }
  std::uint64_t brought_in = 0;  // since the caller last reset it

 private:
  static constexpr std::uint64_t kNever = ~std::uint64_t{0};
  const Recorded& r_;
  std::vector<bool> resident_;
  std::vector<std::uint64_t> next_;                    // each buffer's next use, as of the last launch
  std::vector<std::vector<std::uint64_t>> next_use_;  // per launch, per buffer of it
  std::uint64_t used_ = 0, capacity_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::size_t every = 4096;
  std::size_t top = 0;  // buffers listed for the last window
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--every=", 0) == 0) {
      char* end = nullptr;
      every = std::strtoul(arg.c_str() + 8, &end, 10);
      if (every == 0 || *end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: --every wants a positive number of launches, not '%s'\n", arg.c_str() + 8);
        return 2;
      }
    } else if (arg.rfind("--top=", 0) == 0) {
      char* end = nullptr;
      top = std::strtoul(arg.c_str() + 6, &end, 10);
      if (*end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: --top wants a number of buffers, not '%s'\n", arg.c_str() + 6);
        return 2;
      }
    } else if (path.empty() && arg.rfind("--", 0) != 0) {
      path = arg;
    } else {
      std::fprintf(stderr, "usage: uvmpool-policy-replay FILE.launches [--every=N] [--top=K]\n");
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: uvmpool-policy-replay FILE.launches [--every=N] [--top=K]\n");
    return 2;
  }
  const Recorded r = read_launches(path);
  if (r.launches.empty()) {
    std::fprintf(stderr, "uvmpool-policy-replay: no launches read from '%s' (missing, or not written by scripts/uvmpool-launches.py)\n", path.c_str());
    return 1;
  }
  RecordedWorld rw(r);
  Policy p(rw.world);
  BeladyOnDemand belady(r);
  std::printf("%zu launches over %zu buffers, %.2f GiB on the device at first touch\n", r.launches.size(), r.buffers.size(),
              gib(RecordedWorld::device_bytes(r)));
  // Each window's distinct buffers: the bytes it touched beyond what the device holds must come in
  // (and as much go out) at least once in a window that repeats, whatever the policy.
  const std::uint64_t device = RecordedWorld::device_bytes(r);
  std::vector<bool> touched(r.buffers.size(), false);
  std::vector<std::uint64_t> touches(r.buffers.size(), 0);
  std::uint64_t touched_bytes = 0;
  std::uint64_t period = 0;
  for (std::size_t i = 0; i < r.launches.size(); ++i) {
    rw.launch(p, r.launches[i]);
    belady.launch(i);
    for (std::size_t id : r.launches[i].buffers) {
      if (!touched[id]) touched_bytes += r.buffers[id].first;
      touched[id] = true;
      ++touches[id];
    }
    const PolicyStats& s = p.stats();
    if (s.period != period) {
      period = s.period;
      std::printf("launch %zu: period %llu (learned %llu, dropped %llu, taken anew %llu)\n", i, u(period), u(s.periods_learned),
                  u(s.periods_dropped), u(s.periods_retaken));
    }
    if ((i + 1) % every == 0 || i + 1 == r.launches.size()) {
      const auto& w = rw.world;
      std::printf("  to launch %zu: %llu touches on the device, %llu in host memory (%.2f GiB read in place); moved %.2f GiB in, %.2f GiB out "
                  "(Belady on demand %.2f GiB in; %.2f GiB touched, %.2f beyond the device); taken anew %llu\n",
                  i + 1, u(w.hits), u(w.misses), gib(w.in_place), gib(w.promoted), gib(w.demoted), gib(belady.brought_in),
                  gib(touched_bytes), gib(touched_bytes > device ? touched_bytes - device : 0), u(s.periods_retaken));
      belady.brought_in = 0;
      if (i + 1 == r.launches.size() / every * every) {
        // The last whole window: the buffers whose promotions moved the most bytes in it.
        std::vector<std::pair<std::uint64_t, std::size_t>> most;  // bytes promoted, buffer id
        for (std::size_t id = 0; id < r.buffers.size(); ++id) {
          const auto it = w.promotions_of.find(rw.address[id]);
          if (it != w.promotions_of.end()) most.push_back({it->second * r.buffers[id].first, id});
        }
        std::sort(most.rbegin(), most.rend());
        for (std::size_t k = 0; k < std::min<std::size_t>(most.size(), top); ++k) {
          const std::size_t id = most[k].second;
          std::printf("    buffer %zu (%.1f MiB): promoted %llu times, touched by %llu launches\n", id,
                      static_cast<double>(r.buffers[id].first) / (1u << 20), u(w.promotions_of.at(rw.address[id])),
                      u(touches[id]));
        }
      }
      rw.world.reset_counts();
      touches.assign(touches.size(), 0);
      touched.assign(touched.size(), false);
      touched_bytes = 0;
    }
  }
  const PolicyStats& s = p.stats();
  std::printf("end: period %llu; learned %llu, dropped %llu, taken anew %llu\n", u(s.period), u(s.periods_learned),
              u(s.periods_dropped), u(s.periods_retaken));
  return 0;
}
