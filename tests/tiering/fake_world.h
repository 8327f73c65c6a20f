// A fake world for the tiering policy (src/tiering/policy.h): buffers in two tiers where a move
// happens at once (or in the mover's epochs, FakeWorld::epoch_every), and launch sequences recorded on GPUs (scripts/uvmpool-launches.py writes them
// from a trace) replayed in it. Used by policy_test.cpp and by uvmpool-policy-replay
// (policy_replay.cpp), which prints what the policy learns on a recorded sequence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tiering/policy.h"

namespace uvmpool::tiering::testing {

using uvmpool::pool::Tier;

// Buffers in two tiers with `capacity` bytes of device memory; moves happen when asked (refused past
// the capacity, as the pool would). Counts what launches found where.
class FakeWorld : public Policy::World {
 public:
  explicit FakeWorld(std::uint64_t capacity) : capacity_(capacity) {}

  // `allocation_bytes`: the buffer is a piece of an allocation that large (Policy::Buffer).
  CUdeviceptr add(std::uint64_t bytes, bool host, std::uint64_t allocation_bytes = 0) {
    const CUdeviceptr a = next_;
    next_ += 1 << 30;
    buffers_[a] = {.address = a, .base = a, .bytes = bytes, .host = host, .allocation_bytes = allocation_bytes};
    if (!host) used_ += bytes;
    return a;
  }
  bool in_host(const Policy::Buffer& b) override { return buffers_.at(b.address).host; }
  // Advice (src/tiering/advice.h): launches pass the buffer's preference from now on.
  void prefer(CUdeviceptr a, Preference p) { buffers_.at(a).preference = p; }
  // With `tells_refusals`, a refused move is reported at once (as Tiering's world asks the mover);
  // without, the policy learns of it only when the ask grows old.
  bool moving(const Policy::Buffer& b) override {
    if (epoch_every != 0) return queued(b.address);
    return !(tells_refusals && refused.count(b.address) != 0);
  }
  std::set<CUdeviceptr> refused;  // buffers whose moves are taken and never happen
  bool tells_refusals = false;
  bool stream_order = false;  // in_stream_order: moves prepared where the device reaches them
  bool in_stream_order() override { return stream_order; }
  std::uint64_t device_room() override { return used_ < capacity_ ? capacity_ - used_ : 0; }
  bool move(const Policy::Buffer& b, Tier to) override {
    if (refused.count(b.address) != 0) return true;  // taken, then refused later (as the mover does)
    Policy::Buffer& x = buffers_.at(b.address);
    if (x.host == (to == Tier::Host)) return true;
    if (epoch_every != 0) {  // carried out by a later epoch (below)
      if (!queued(b.address)) queue_.push_back({b.address, to, x.bytes, false});
      return true;
    }
    return carry(b.address, to);
  }

  // Moves as the mover makes them, in epochs: with `epoch_every` > 0 a move asked is queued, and
  // after every `epoch_every`-th launch an epoch takes at most `epoch_bytes` each way
  // (UVMPOOL_TIERING_BATCH), oldest first, demotions before promotions; a larger move takes several
  // epochs and lands whole with the last (the mover splits it into runs of a batch; counted whole
  // here). A promotion takes its room when it starts, or waits while demotions are queued, standing
  // or taken in its own epoch (as the mover puts it back), and is refused when none are. The epoch's
  // moves land `land_after` launches after it was taken, with at most `holds_ahead` epochs
  // standing: 0 and 1 model epochs on the launching thread (UVMPOOL_TIERING_EPOCHS=launch: every 4
  // launches, landing before the launch returns); the device's lag behind the program and
  // UVMPOOL_TIERING_HOLDS_AHEAD model the mover's thread (its holds land when the device reaches
  // them; while holds stand the program runs at most 512 launches ahead). Until a move lands the
  // buffer lies where it was: launches meanwhile read it there.
  std::size_t epoch_every = 0;
  std::uint64_t epoch_bytes = std::uint64_t{256} << 20;
  std::size_t land_after = 0;
  std::size_t holds_ahead = 1;
  // What if (not what the mover does): on the launching thread an epoch that demoted is followed at
  // once by a second for the promotions that waited for its room. Replayed on rows 7 and 4b it cut
  // the bytes read in place (docs/tiering.md), but modeled on the simulator it lost more than it
  // gained: the two directions' copies no longer overlap, and each epoch costs a hold.
  bool second_epoch = false;
  std::uint64_t epochs = 0, refusals = 0;

 private:
  struct Queued {
    CUdeviceptr address;
    Tier to;
    std::uint64_t left;  // bytes still to copy
    bool started;        // its room taken (promotions)
  };
  struct Standing {
    std::uint64_t due;                                  // the launch count its moves land at
    std::vector<std::pair<CUdeviceptr, Tier>> lands;    // moves whose last part it carries
  };
  std::vector<Queued> queue_;
  std::vector<Standing> standing_;  // oldest first
  std::uint64_t launches_ = 0;
  bool queued(CUdeviceptr a) const {
    const auto same = [a](const auto& m) { return m.first == a; };
    return std::any_of(queue_.begin(), queue_.end(), [a](const Queued& q) { return q.address == a; }) ||
           std::any_of(standing_.begin(), standing_.end(), [&](const Standing& e) { return std::any_of(e.lands.begin(), e.lands.end(), same); });
  }
  bool demoting() const {
    return std::any_of(queue_.begin(), queue_.end(), [](const Queued& o) { return o.to == Tier::Host; }) ||
           std::any_of(standing_.begin(), standing_.end(), [](const Standing& e) {
             return std::any_of(e.lands.begin(), e.lands.end(), [](const auto& m) { return m.second == Tier::Host; });
           });
  }
  void land(CUdeviceptr a, Tier to) {
    if (to == Tier::Device) used_ -= buffers_.at(a).bytes;  // taken when it started; carry() takes it again
    carry(a, to);
  }
  void land_due() {
    while (!standing_.empty() && standing_.front().due <= launches_) {
      for (const auto& [a, to] : standing_.front().lands) land(a, to);
      standing_.erase(standing_.begin());
    }
  }
  // Takes an epoch's moves; true when it demoted.
  bool take_epoch() {
    ++epochs;
    Standing e{launches_ + land_after, {}};
    for (const Tier to : {Tier::Host, Tier::Device}) {
      std::uint64_t budget = epoch_bytes;
      for (std::size_t i = 0; i < queue_.size() && budget != 0;) {
        Queued& q = queue_[i];
        if (q.to != to) {
          ++i;
          continue;
        }
        Policy::Buffer& x = buffers_.at(q.address);
        if (to == Tier::Device && !q.started) {
          if (used_ + x.bytes > capacity_) {
            const bool this_epoch = std::any_of(e.lands.begin(), e.lands.end(), [](const auto& m) { return m.second == Tier::Host; });
            if (this_epoch || demoting()) {
              ++i;  // waits for the room they make
              continue;
            }
            ++refusals;
            queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
          }
          used_ += x.bytes;  // taken now, as the pool's target pieces are
          q.started = true;
        }
        const std::uint64_t copied = std::min(q.left, budget);
        q.left -= copied;
        budget -= copied;
        if (q.left != 0) break;  // the rest next epoch
        e.lands.emplace_back(q.address, to);
        queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    const bool demoted = std::any_of(e.lands.begin(), e.lands.end(), [](const auto& m) { return m.second == Tier::Host; });
    standing_.push_back(std::move(e));
    land_due();  // at once when land_after is 0
    return demoted;
  }

 public:
  // The move made now: one asked with epochs off, or an epoch's.
  bool carry(CUdeviceptr a, Tier to) {
    Policy::Buffer& x = buffers_.at(a);
    if (to == Tier::Device) {
      if (used_ + x.bytes > capacity_) return false;
      used_ += x.bytes;
      promoted += x.bytes;
    } else {
      used_ -= x.bytes;
      demoted += x.bytes;
    }
    x.host = to == Tier::Host;
    (to == Tier::Device ? ever_promoted : ever_demoted).insert(a);
    if (to == Tier::Device) ++promotions_of[a];
    clock += x.bytes;  // a byte over PCIe: 1 ns
    return true;
  }
  // With `timed`, a period's time is answered as the next begins: launches and moves take modeled
  // time on `clock` (ns): a byte over PCIe 1, from device memory 1/64 (HBM against PCIe, about).
  std::optional<PeriodTrial::Time> period_started(std::uint64_t n) override {
    const std::uint64_t ns = clock - marked_;
    marked_ = clock;
    if (!timed || n == 1) return std::nullopt;
    return PeriodTrial::Time{n - 1, ns};
  }
  bool timed = false;
  std::uint32_t passes = 1;  // times a launch reads each buffer it touches
  std::uint64_t clock = 0;
  // One launch of `function` over `addresses`: counts hits (on device) and bytes read in place.
  void launch(Policy& policy, std::uint64_t function, const std::vector<CUdeviceptr>& addresses) {
    std::vector<Touched> touches;
    for (CUdeviceptr a : addresses) touches.push_back({a, a});
    launch_touches(policy, function, touches);
  }
  // The same, each buffer passed by `pointer` (inside it: a tensor of a segment); a launch reads all
  // of each buffer it touches.
  struct Touched {
    CUdeviceptr buffer;
    CUdeviceptr pointer;
  };
  void launch_touches(Policy& policy, std::uint64_t function, const std::vector<Touched>& touches) {
    std::vector<Policy::Buffer> seen;
    std::vector<CUdeviceptr> counted;  // a buffer two pointers lie in is read once
    for (const auto& [a, pointer] : touches) {
      Policy::Buffer b = buffers_.at(a);
      b.address = pointer;
      seen.push_back(b);
      if (std::find(counted.begin(), counted.end(), a) != counted.end()) continue;
      counted.push_back(a);
      const std::uint64_t read = b.bytes;
      if (b.host) {
        ++misses;
        in_place += read;
        clock += read * passes;
      } else {
        ++hits;
        clock += read * passes / 64;
      }
    }
    policy.on_launch(function, seen);
    if (epoch_every == 0) return;
    ++launches_;
    land_due();
    if (launches_ % epoch_every == 0 && !queue_.empty() && standing_.size() < holds_ahead) {
      // With second_epoch (landing at once), an epoch that demoted is followed by a second.
      if (take_epoch() && land_after == 0 && second_epoch && !queue_.empty()) take_epoch();
    }
  }
  void reset_counts() {
    hits = misses = in_place = promoted = demoted = 0;
    promotions_of.clear();
  }
  std::uint64_t used() const { return used_; }

  std::uint64_t hits = 0, misses = 0, in_place = 0, promoted = 0, demoted = 0;
  std::set<CUdeviceptr> ever_promoted, ever_demoted;
  std::map<CUdeviceptr, std::uint64_t> promotions_of;  // since the last reset_counts

 private:
  std::uint64_t capacity_, used_ = 0, marked_ = 0;
  CUdeviceptr next_ = 1ull << 40;
  std::map<CUdeviceptr, Policy::Buffer> buffers_;
};

// A launch sequence recorded on a GPU (scripts/uvmpool-launches.py writes one from a trace): the
// buffers with their sizes and first tiers, and the launches over them.
struct Recorded {
  struct Launch {
    std::uint64_t function;
    std::vector<std::size_t> buffers;                            // each once
    std::vector<std::pair<std::size_t, std::uint64_t>> pointers;  // buffer and offset, each pointer passed
  };
  std::vector<std::pair<std::uint64_t, bool>> buffers;  // bytes, in host memory at its first touch
  std::vector<Launch> launches;
};

inline Recorded read_launches(const std::string& path) {
  Recorded r;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "b") {
      std::size_t id = 0;
      std::uint64_t bytes = 0;
      words >> id >> bytes;
      if (r.buffers.size() <= id) r.buffers.resize(id + 1);
      r.buffers[id] = {bytes, true};  // the tier: its first touch says
    } else if (kind == "l") {
      Recorded::Launch launch{};
      words >> launch.function;
      for (std::string word; words >> word;) {
        std::size_t end = 0;
        const std::size_t id = std::stoul(word, &end);
        const std::uint64_t offset = end < word.size() && word[end] == '+' ? std::stoull(word.substr(end + 1)) : 0;
        launch.pointers.push_back({id, offset});
        if (std::find(launch.buffers.begin(), launch.buffers.end(), id) == launch.buffers.end()) launch.buffers.push_back(id);
      }
      r.launches.push_back(std::move(launch));
    }
  }
  // First tiers: from each buffer's first touch.
  std::vector<bool> seen(r.buffers.size(), false);
  in.clear();
  in.seekg(0);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, word;
    words >> kind;
    if (kind != "l") continue;
    words >> word;
    while (words >> word) {
      const std::size_t id = std::stoul(word);
      if (seen[id]) continue;
      seen[id] = true;
      r.buffers[id].second = word.back() == 'h';
    }
  }
  return r;
}

// A recorded sequence's buffers in a fake world with the device memory the pool gave the job, each
// in the tier of its first touch.
struct RecordedWorld {
  explicit RecordedWorld(const Recorded& r) : world(device_bytes(r)) {
    for (const auto& [bytes, host] : r.buffers) address.push_back(world.add(bytes, host));
  }
  static std::uint64_t device_bytes(const Recorded& r) {
    std::uint64_t device = 0;
    for (const auto& [bytes, host] : r.buffers) device += host ? 0 : bytes;
    return device;
  }
  void launch(Policy& p, const Recorded::Launch& l) {
    std::vector<FakeWorld::Touched> touches;  // each pointer as recorded, inside its buffer
    for (const auto& [id, offset] : l.pointers) touches.push_back({address[id], address[id] + offset});
    world.launch_touches(p, l.function, touches);
  }
  FakeWorld world;
  std::vector<CUdeviceptr> address;
};

}  // namespace uvmpool::tiering::testing
