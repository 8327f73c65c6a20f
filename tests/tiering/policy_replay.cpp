// uvmpool-policy-replay: replays a launch sequence recorded on a GPU (scripts/uvmpool-launches.py
// writes one from a trace) on the tiering policy in a fake world (fake_world.h: the device memory
// the pool gave the job, moves made at once), and prints what the policy learned and when, and per
// window of launches what the launches found where, against Belady on demand (below) and the bytes
// the window touched beyond what the device holds (what any policy must bring in once, when the window
// repeats). A bound on what the policy can do, not a figure
// of a GPU: no mover, no clock.
//
//   uvmpool-policy-replay FILE.launches [--every=N] [--top=K] [--granule=MiB] [--unit=allocation|piece] [--slot=MiB]
//                         [--epoch-every=N] [--batch=MiB] [--land-after=N] [--holds-ahead=N] [--second-epoch] [--stream-order]
//                         [--lookahead=N] [--in-flight=MiB] [--guard=on|off]
//
// --unit=piece gives the policy pieces of allocations as its buffers (UVMPOOL_TIERING_UNIT=piece,
// src/tiering/pieces.h) instead of whole allocations; --slot=MiB carved slots of that size, as
// carving lays the allocations out and tiering shows them (slot_units); --epoch-every=N makes the moves late as the
// mover's epochs on the launching thread make them (one every N launches, at most --batch MiB each
// way; FakeWorld::epoch_every) instead of at once, and with --land-after=D --holds-ahead=H as the
// mover's thread makes them (landing D launches after they were taken, H epochs standing at most);
// --second-epoch: what if an epoch on the launching thread that demoted were followed at once by
// a second for the promotions that waited for its room (FakeWorld::second_epoch; the mover does not);
// --lookahead and --in-flight set the policy's;
// --top=K lists, for the last whole window, the K buffers whose promotions moved the most bytes;
// --granule (2 MiB, the pool's chunk) rounds the pieces Belady on demand moves by pieces.
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
using uvmpool::tiering::testing::FakeWorld;
using uvmpool::tiering::testing::RecordedWorld;

unsigned long long u(std::uint64_t v) { return static_cast<unsigned long long>(v); }
double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1u << 30); }

// What Belady on demand moves: units of memory (whole allocations, or pieces of them), each with its
// bytes and first tier, and the units each launch needs.
struct Units {
  std::vector<std::uint64_t> bytes;
  std::vector<bool> host;
  std::vector<std::uint64_t> allocation_bytes;  // of the allocation each lies in
  std::vector<std::vector<std::size_t>> of_launch;
  // With slots (slot_units): each launch's pointers, as the unit and the pointer's offset from the
  // unit's start (negative for a slot after the one the pointer lies in: Tiering::show_policy passes
  // the allocation's pointer with each of its slots).
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> pointers_of_launch;
};

// Units of whole allocations: what the policy moves.
Units allocation_units(const Recorded& r) {
  Units u;
  for (const auto& [bytes, host] : r.buffers) {
    u.bytes.push_back(bytes);
    u.host.push_back(host);
    u.allocation_bytes.push_back(bytes);
  }
  for (const auto& l : r.launches) u.of_launch.push_back(l.buffers);
  return u;
}

// Units of pieces: each allocation cut where any launch passed a pointer into it (rounded down to
// `granule`, the pool's unit of a move), a pointer needing the piece it starts; the part before the
// first pointer is a piece no launch needs. What a policy could move if it knew each tensor's extent
// from the pointers alone; known here from the whole sequence ahead, so a bound.
Units piece_units(const Recorded& r, std::uint64_t granule) {
  std::vector<std::vector<std::uint64_t>> starts(r.buffers.size(), std::vector<std::uint64_t>{0});
  for (const auto& l : r.launches)
    for (const auto& [id, offset] : l.pointers) starts[id].push_back(offset / granule * granule);
  Units u;
  std::vector<std::size_t> first(r.buffers.size());  // each allocation's first unit
  for (std::size_t id = 0; id < r.buffers.size(); ++id) {
    std::vector<std::uint64_t>& s = starts[id];
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    first[id] = u.bytes.size();
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::uint64_t end = k + 1 < s.size() ? s[k + 1] : std::max(r.buffers[id].first, s[k]);
      u.bytes.push_back(end - s[k]);
      u.host.push_back(r.buffers[id].second);
      u.allocation_bytes.push_back(r.buffers[id].first);
    }
  }
  for (const auto& l : r.launches) {
    std::vector<std::size_t> units;
    for (const auto& [id, offset] : l.pointers) {
      const std::vector<std::uint64_t>& s = starts[id];
      const std::size_t k = static_cast<std::size_t>(std::upper_bound(s.begin(), s.end(), offset / granule * granule) - s.begin()) - 1;
      if (std::find(units.begin(), units.end(), first[id] + k) == units.end()) units.push_back(first[id] + k);
    }
    u.of_launch.push_back(std::move(units));
  }
  return u;
}

// Units of carved slots (UVMPOOL_CARVE_MAX, pool/carved_range.h): allocations laid out one after
// another in first-touch order, in two lanes as carving has them (up to a sixteenth of a slot: the
// small lane), each lane in slots of its own; each slot a unit, shown for a pointer from the slot the
// pointer lies in to the allocation's last, as Tiering::show_policy shows carved memory. Slots start
// on the device, in order, while the bytes the recording had on the device at first touch last. A
// model of carving's layout (it places best fit, and frees reuse gaps), not the pool's own.
Units slot_units(const Recorded& r, std::uint64_t slot, std::uint64_t device) {
  struct Lane {
    std::uint64_t next = 0;              // bytes laid out in the lane so far
    std::vector<std::size_t> unit_of_slot;  // the unit of each of the lane's slots
  };
  Lane lanes[2];
  std::vector<std::pair<int, std::uint64_t>> where(r.buffers.size());  // lane and offset in it
  for (std::size_t id = 0; id < r.buffers.size(); ++id) {
    const std::uint64_t bytes = (std::max<std::uint64_t>(r.buffers[id].first, 256) + 255) & ~std::uint64_t{255};
    const int lane = bytes <= slot / 16 ? 0 : 1;
    where[id] = {lane, lanes[lane].next};
    lanes[lane].next += bytes;
  }
  Units u;
  std::uint64_t placed = 0;
  for (Lane& lane : lanes) {
    for (std::uint64_t at = 0; at < lane.next; at += slot) {
      lane.unit_of_slot.push_back(u.bytes.size());
      u.bytes.push_back(slot);
      u.host.push_back(placed + slot > device);
      if (placed + slot <= device) placed += slot;
      u.allocation_bytes.push_back(slot);
    }
  }
  for (const auto& l : r.launches) {
    std::vector<std::size_t> units;
    std::vector<std::pair<std::size_t, std::int64_t>> pointers;
    for (const auto& [id, offset] : l.pointers) {
      const auto [lane, start] = where[id];
      const std::uint64_t p = start + std::min<std::uint64_t>(offset, r.buffers[id].first);
      const std::uint64_t last = start + std::max<std::uint64_t>(r.buffers[id].first, 1) - 1;
      for (std::uint64_t k = p / slot; k <= last / slot; ++k) {
        const std::size_t unit = lanes[lane].unit_of_slot[k];
        if (std::find(units.begin(), units.end(), unit) == units.end()) units.push_back(unit);
        pointers.push_back({unit, static_cast<std::int64_t>(p) - static_cast<std::int64_t>(k * slot)});
      }
    }
    u.of_launch.push_back(std::move(units));
    u.pointers_of_launch.push_back(std::move(pointers));
  }
  return u;
}

// The policy's fake world over units: each a buffer of its own, a launch passing those it needs.
struct UnitWorld {
  UnitWorld(const Units& units, std::uint64_t device) : u(units), world(device) {
    for (std::size_t id = 0; id < u.bytes.size(); ++id)
      address.push_back(world.add(u.bytes[id], u.host[id], u.allocation_bytes[id] != u.bytes[id] ? u.allocation_bytes[id] : 0));
  }
  void launch(Policy& p, std::uint64_t function, std::size_t t) {
    if (!u.pointers_of_launch.empty()) {  // slots: each pointer as the launch passed it
      std::vector<FakeWorld::Touched> touches;
      for (const auto& [id, offset] : u.pointers_of_launch[t])
        touches.push_back({address[id], static_cast<CUdeviceptr>(static_cast<std::int64_t>(address[id]) + offset)});
      world.launch_touches(p, function, touches);
      return;
    }
    std::vector<CUdeviceptr> args;
    for (std::size_t id : u.of_launch[t]) args.push_back(address[id]);
    world.launch(p, function, args);
  }
  const Units& u;
  FakeWorld world;
  std::vector<CUdeviceptr> address;
};

// Belady on demand, the comparison: every future use known, a unit brought in when a launch needs it,
// room made by sending out the units used farthest ahead (none the launch uses). With moves made at
// once, what crosses PCIe is then set by the access pattern and the unit moved, not by foresight.
class BeladyOnDemand {
 public:
  explicit BeladyOnDemand(Units units) : u_(std::move(units)), resident_(u_.bytes.size()), next_(u_.bytes.size(), kNever) {
    for (std::size_t id = 0; id < u_.bytes.size(); ++id) {
      resident_[id] = !u_.host[id];
      if (resident_[id]) used_ += u_.bytes[id];
    }
    capacity_ = used_;
    // For each launch, where each of its units is used next.
    std::vector<std::uint64_t> last(u_.bytes.size(), kNever);
    next_use_.resize(u_.of_launch.size());
    for (std::size_t t = u_.of_launch.size(); t-- > 0;) {
      for (std::size_t id : u_.of_launch[t]) next_use_[t].push_back(last[id]);
      for (std::size_t id : u_.of_launch[t]) last[id] = t;
    }
  }
  // Launch t: counts the bytes brought in for it.
  void launch(std::size_t t) {
    const std::vector<std::size_t>& ids = u_.of_launch[t];
    for (std::size_t k = 0; k < ids.size(); ++k) next_[ids[k]] = next_use_[t][k];
    for (std::size_t id : ids) {
      if (resident_[id]) continue;
      const std::uint64_t bytes = u_.bytes[id];
      while (used_ + bytes > capacity_) {
        std::size_t victim = u_.bytes.size();
        for (std::size_t j = 0; j < resident_.size(); ++j) {
          if (!resident_[j] || std::find(ids.begin(), ids.end(), j) != ids.end()) continue;
          if (victim == u_.bytes.size() || next_[j] > next_[victim]) victim = j;
        }
        if (victim == u_.bytes.size()) break;
        resident_[victim] = false;
        used_ -= u_.bytes[victim];
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
  Units u_;
  std::vector<bool> resident_;
  std::vector<std::uint64_t> next_;                    // each unit's next use, as of the last launch
  std::vector<std::vector<std::uint64_t>> next_use_;  // per launch, per unit of it
  std::uint64_t used_ = 0, capacity_ = 0;
};

}  // namespace

constexpr const char* kUsage =
    "usage: uvmpool-policy-replay FILE.launches [--every=N] [--top=K] [--granule=MiB] [--unit=allocation|piece] [--slot=MiB]\n"
    "       [--epoch-every=N] [--batch=MiB] [--land-after=N] [--holds-ahead=N] [--second-epoch] [--stream-order]\n"
    "       [--lookahead=N] [--in-flight=MiB] [--guard=on|off]\n";

int main(int argc, char** argv) {
  std::string path;
  std::size_t every = 4096;
  std::size_t top = 0;  // buffers listed for the last window
  std::uint64_t granule = std::uint64_t{2} << 20;  // the pool's unit of a move, for pieces
  bool pieces = false;  // the policy's buffers: pieces (UVMPOOL_TIERING_UNIT=piece) or allocations
  std::uint64_t slot = 0;  // --slot: carved slots of this size as the policy's buffers
  std::size_t epoch_every = 0;  // moves made at once; else by epochs (FakeWorld::epoch_every)
  std::uint64_t epoch_bytes = std::uint64_t{256} << 20;
  std::size_t land_after = 0, holds_ahead = 1;  // FakeWorld's
  bool second_epoch = false;
  bool stream_order = false;
  uvmpool::tiering::PolicyConfig config;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--every=", 0) == 0) {
      char* end = nullptr;
      every = std::strtoul(arg.c_str() + 8, &end, 10);
      if (every == 0 || *end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: --every wants a positive number of launches, not '%s'\n", arg.c_str() + 8);
        return 2;
      }
    } else if (arg.rfind("--granule=", 0) == 0) {
      char* end = nullptr;
      granule = std::strtoull(arg.c_str() + 10, &end, 10) << 20;
      if (granule == 0 || *end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: --granule wants a positive number of MiB, not '%s'\n", arg.c_str() + 10);
        return 2;
      }
    } else if (arg.rfind("--epoch-every=", 0) == 0 || arg.rfind("--batch=", 0) == 0 || arg.rfind("--lookahead=", 0) == 0 ||
               arg.rfind("--in-flight=", 0) == 0 || arg.rfind("--land-after=", 0) == 0 || arg.rfind("--holds-ahead=", 0) == 0) {
      const std::size_t eq = arg.find('=');
      char* end = nullptr;
      const std::uint64_t v = std::strtoull(arg.c_str() + eq + 1, &end, 10);
      if (v == 0 || *end != '\0') {
        std::fprintf(stderr, "uvmpool-policy-replay: %s wants a positive number, not '%s'\n", arg.substr(0, eq).c_str(), arg.c_str() + eq + 1);
        return 2;
      }
      if (arg[2] == 'e') epoch_every = v;
      if (arg[2] == 'b') epoch_bytes = v << 20;
      if (arg.rfind("--lookahead=", 0) == 0) config.lookahead = v;
      if (arg[2] == 'i') config.in_flight_bytes = v << 20;
      if (arg.rfind("--land-after=", 0) == 0) land_after = v;
      if (arg[2] == 'h') holds_ahead = v;
    } else if (arg.rfind("--slot=", 0) == 0) {
      char* end = nullptr;
      slot = std::strtoull(arg.c_str() + 7, &end, 10) << 20;
      if (slot == 0 || *end != '\0' || (slot & (slot - 1)) != 0) {
        std::fprintf(stderr, "uvmpool-policy-replay: --slot wants a power of two of MiB, not '%s'\n", arg.c_str() + 7);
        return 2;
      }
    } else if (arg == "--guard=on" || arg == "--guard=off") {
      // The thrash guard fixed (UVMPOOL_TIERING_THRASH_GUARD): the replay has no clock to time its trial by.
      config.guard.setting = arg == "--guard=on" ? uvmpool::tiering::TrialSetting::First : uvmpool::tiering::TrialSetting::Second;
    } else if (arg == "--stream-order") {
      stream_order = true;  // the policy plans in the streams' order (UVMPOOL_TIERING_PREPARE=hold)
    } else if (arg == "--second-epoch") {
      second_epoch = true;
    } else if (arg == "--unit=piece" || arg == "--unit=allocation") {
      pieces = arg == "--unit=piece";
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
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const Recorded r = read_launches(path);
  if (r.launches.empty()) {
    std::fprintf(stderr, "uvmpool-policy-replay: no launches read from '%s' (missing, or not written by scripts/uvmpool-launches.py)\n", path.c_str());
    return 1;
  }
  // By pieces only where the sequence has pointers' offsets (scripts/uvmpool-launches.py writes them
  // since 2026-11-29).
  const bool offsets = std::any_of(r.launches.begin(), r.launches.end(), [](const Recorded::Launch& l) {
    return std::any_of(l.pointers.begin(), l.pointers.end(), [](const auto& p) { return p.second != 0; });
  });
  if (pieces && !offsets) {
    std::fprintf(stderr, "uvmpool-policy-replay: --unit=piece needs pointers' offsets, which '%s' lacks (written before 2026-11-29)\n", path.c_str());
    return 1;
  }
  const Units by_allocation = allocation_units(r);
  const Units by_piece = offsets ? piece_units(r, granule) : Units{};
  // With pieces, the policy is given the cuts of the whole sequence from the start; Tiering finds
  // them as launches pass their pointers (src/tiering/pieces.h), all of them within the first step.
  const Units by_slot = slot != 0 ? slot_units(r, slot, RecordedWorld::device_bytes(r)) : Units{};
  UnitWorld rw(slot != 0 ? by_slot : pieces ? by_piece : by_allocation, RecordedWorld::device_bytes(r));
  rw.world.epoch_every = epoch_every;
  rw.world.epoch_bytes = epoch_bytes;
  rw.world.land_after = land_after;
  rw.world.holds_ahead = holds_ahead;
  rw.world.second_epoch = second_epoch;
  rw.world.stream_order = stream_order;
  Policy p(rw.world, config);
  BeladyOnDemand belady(by_allocation);
  BeladyOnDemand by_pieces(by_piece);
  std::printf("%zu launches over %zu buffers, %.2f GiB on the device at first touch\n", r.launches.size(), r.buffers.size(),
              gib(RecordedWorld::device_bytes(r)));
  // Each window's distinct buffers: the bytes it touched beyond what the device holds must come in
  // (and as much go out) at least once in a window that repeats, whatever the policy.
  const std::uint64_t device = RecordedWorld::device_bytes(r);
  std::vector<bool> touched(r.buffers.size(), false);
  std::vector<std::uint64_t> unit_touches(rw.u.bytes.size(), 0);  // launches touching each, in the window
  std::uint64_t touched_bytes = 0;
  std::uint64_t period = 0;
  for (std::size_t i = 0; i < r.launches.size(); ++i) {
    rw.launch(p, r.launches[i].function, i);
    belady.launch(i);
    if (offsets) by_pieces.launch(i);
    for (std::size_t id : rw.u.of_launch[i]) ++unit_touches[id];
    for (std::size_t id : r.launches[i].buffers) {
      if (!touched[id]) touched_bytes += r.buffers[id].first;
      touched[id] = true;
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
                  "(Belady on demand %.2f GiB in",
                  i + 1, u(w.hits), u(w.misses), gib(w.in_place), gib(w.promoted), gib(w.demoted), gib(belady.brought_in));
      if (offsets) std::printf(", by pieces %.2f", gib(by_pieces.brought_in));
      std::printf("; %.2f GiB touched, %.2f beyond the device); taken anew %llu; so far asked %llu up, %llu down, %llu waited "
                  "for the in-flight budget, %llu for room, %llu kept in place\n",
                  gib(touched_bytes), gib(touched_bytes > device ? touched_bytes - device : 0), u(s.periods_retaken),
                  u(s.promotions), u(s.demotions), u(s.waited_in_flight), u(s.waited_room), u(s.kept_in_place));
      belady.brought_in = by_pieces.brought_in = 0;
      if (i + 1 == r.launches.size() / every * every) {
        // The last whole window: the buffers (units, with pieces) whose promotions moved the most bytes in it.
        std::vector<std::pair<std::uint64_t, std::size_t>> most;  // bytes promoted, unit id
        for (std::size_t id = 0; id < rw.u.bytes.size(); ++id) {
          const auto it = w.promotions_of.find(rw.address[id]);
          if (it != w.promotions_of.end()) most.push_back({it->second * rw.u.bytes[id], id});
        }
        std::sort(most.rbegin(), most.rend());
        for (std::size_t k = 0; k < std::min<std::size_t>(most.size(), top); ++k) {
          const std::size_t id = most[k].second;
          std::printf("    %s %zu (%.1f MiB): promoted %llu times, touched by %llu launches\n", pieces ? "piece" : "buffer", id,
                      static_cast<double>(rw.u.bytes[id]) / (1u << 20), u(w.promotions_of.at(rw.address[id])),
                      u(unit_touches[id]));
        }
      }
      rw.world.reset_counts();
      unit_touches.assign(unit_touches.size(), 0);
      touched.assign(touched.size(), false);
      touched_bytes = 0;
    }
  }
  const PolicyStats& s = p.stats();
  std::printf("end: period %llu; learned %llu, dropped %llu, taken anew %llu", u(s.period), u(s.periods_learned),
              u(s.periods_dropped), u(s.periods_retaken));
  if (epoch_every != 0) std::printf("; %llu epochs, %llu promotions refused for room", u(rw.world.epochs), u(rw.world.refusals));
  std::printf("\n");
  return 0;
}
