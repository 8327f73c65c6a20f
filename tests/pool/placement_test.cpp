// The placement rule (src/pool/placement.h) on its own, against tables of situations: a stock of
// quantities stands in for the pool, and each case checks what was taken, from where, and in which
// order idle memory was taken apart. The pool's own suites check that DevicePool carries it out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pool/placement.h"

namespace {

using namespace uvmpool::pool::placement;

// What the pool holds, in granules.
struct Situation {
  std::size_t free = 0;          // free device pieces
  bool extent_free = false;
  std::size_t growable = 0;      // the budget's room
  bool growth_refused = false;   // the driver says no to growth
  std::size_t cached = 0;        // device granules in cached mappings
  std::size_t slabs = 0;         // empty slabs (one granule each)
  std::size_t carved = 0;        // idle carved slots' granules
  std::size_t spilled_device = 0, spilled_host = 0;  // cached spilled mappings' pieces
  bool spilled_of_size = false;  // one of them is of the size asked for
  std::size_t runs = 0;          // premapped host runs' granules
  std::size_t host_only = 0;     // cached wholly-host mappings' granules
  bool joined = false, host_run = false;  // whole mappings that would serve: joined cached ones, a run
  std::size_t loose = 0;         // loose host chunks
  std::size_t pinnable = 0;      // the host limit's room
  std::size_t device_refused_after = SIZE_MAX;  // take_device gives at most this many (a driver refusal)
};

class TableStock final : public Stock {
 public:
  explicit TableStock(Situation s) : s_(s) {}

  std::size_t free_device() override { return s_.free; }
  bool free_extent() override { return s_.extent_free; }
  std::size_t growable() override { return s_.growable; }
  void grow(std::size_t n) override {
    log("grow " + std::to_string(n));
    if (s_.growth_refused) return;
    s_.free += n;
    s_.growable -= n;
  }
  std::size_t reclaim(Idle source, std::size_t n) override {
    std::size_t got = 0;
    switch (source) {
      case Idle::CachedMappings: got = std::min(n, s_.cached); s_.cached -= got; s_.free += got; break;
      case Idle::EmptySlabs: got = s_.slabs; s_.slabs = 0; s_.free += got; break;
      case Idle::CarvedSlots: got = std::min(n, s_.carved); s_.carved -= got; s_.free += got; break;
      case Idle::SpilledMappings:
        got = s_.spilled_device + s_.spilled_host;
        s_.free += s_.spilled_device;
        s_.loose += s_.spilled_host;
        s_.spilled_device = s_.spilled_host = 0;
        break;
      case Idle::HostRuns: got = std::min(n, s_.runs); s_.runs -= got; s_.loose += got; break;
      case Idle::AllHostMappings:
        got = s_.spilled_device + s_.spilled_host + s_.runs + s_.host_only;
        s_.free += s_.spilled_device;
        s_.loose += s_.spilled_host + s_.runs + s_.host_only;
        s_.spilled_device = s_.spilled_host = s_.runs = s_.host_only = 0;
        break;
    }
    if (got != 0) log(std::string("reclaim ") + name(source) + " " + std::to_string(got));
    return got;
  }
  bool reuse(Whole whole, std::size_t) override {
    const bool held = (whole == Whole::JoinedCachedMappings && s_.joined) ||
                      (whole == Whole::SpilledOfTheSize && s_.spilled_of_size) || (whole == Whole::HostRun && s_.host_run);
    if (held) log(std::string("reuse ") + name(whole));
    return held;
  }
  std::size_t take_device(std::size_t n) override {
    const std::size_t got = std::min({n, s_.free, s_.device_refused_after});
    s_.free -= got;
    device_taken_ += got;
    return got;
  }
  std::size_t loose_host() override { return s_.loose; }
  bool take_host(std::size_t n) override {
    if (s_.loose + s_.pinnable < n) return false;
    const std::size_t from_loose = std::min(n, s_.loose);
    s_.loose -= from_loose;
    s_.pinnable -= n - from_loose;
    host_taken_ += n;
    return true;
  }
  void give_back() override {
    log("give back");
    s_.free += device_taken_;
    s_.loose += host_taken_;
    device_taken_ = host_taken_ = 0;
  }

  const std::vector<std::string>& calls() const { return calls_; }
  const Situation& now() const { return s_; }

 private:
  void log(std::string call) { calls_.push_back(std::move(call)); }
  Situation s_;
  std::size_t device_taken_ = 0, host_taken_ = 0;
  std::vector<std::string> calls_;
};

struct Case {
  const char* what;
  Ask ask;
  Situation situation;
  Plan expected;
  std::vector<std::string> calls;  // reclaims, growth, reuses and give-backs, in order
};

std::string describe(const Plan& p) {
  if (p.refused) return "refused";
  if (p.whole != Whole::None) return std::string("whole: ") + name(p.whole);
  return "device " + std::to_string(p.device) + ", host " + std::to_string(p.host);
}

void check(const Case& c) {
  TableStock stock(c.situation);
  const Plan got = place(stock, c.ask);
  EXPECT_EQ(describe(got), describe(c.expected)) << c.what;
  EXPECT_EQ(stock.calls(), c.calls) << c.what;
}

constexpr Ask mapping(std::size_t n, bool host = true) { return {Purpose::Mapping, n, host, true}; }
constexpr Ask pieces(std::size_t n, bool host = true) { return {Purpose::Pieces, n, host, true}; }

TEST(Placement, DeviceMemoryFirstIdleMemoryInReclaimOrderBeforeGrowth) {
  const Case cases[] = {
      {"fits in free pieces: nothing reclaimed, nothing grown", pieces(4), {.free = 8, .growable = 100, .cached = 8},
       {.device = 4}, {}},
      {"cached mappings give up only the shortfall, before growth", pieces(4), {.free = 1, .growable = 100, .cached = 8},
       {.device = 4}, {"reclaim cached mappings 3"}},
      {"cached mappings, then empty slabs, then idle carved slots", pieces(6),
       {.free = 0, .cached = 1, .slabs = 2, .carved = 8},
       {.device = 6},
       {"reclaim cached mappings 1", "reclaim empty slabs 2", "reclaim idle carved slots 3"}},
      {"growth covers what idle memory cannot", pieces(4), {.free = 0, .growable = 10, .cached = 1},
       {.device = 4}, {"reclaim cached mappings 1", "grow 3"}},
      {"without a host tier, growth is all or nothing and a shortfall is refused", pieces(4, false),
       {.free = 0, .growable = 2, .loose = 100},
       {.refused = true}, {}},
      {"with a host tier the device part grows and the rest spills", pieces(4),
       {.free = 0, .growable = 2, .loose = 100},
       {.device = 2, .host = 2}, {"grow 2"}},
      {"cached spilled mappings give their device pieces only when growth is not enough", pieces(6),
       {.free = 1, .growable = 1, .spilled_device = 4, .spilled_host = 3, .loose = 0, .pinnable = 100},
       {.device = 6}, {"grow 1", "reclaim cached spilled mappings' device pieces 7"}},
      {"a growth the driver refuses leaves the rest to the host tier", pieces(4),
       {.free = 1, .growable = 10, .growth_refused = true, .loose = 3},
       {.device = 1, .host = 3}, {"grow 3"}},
  };
  for (const Case& c : cases) check(c);
}

TEST(Placement, AMappingIsServedWholeByWhatTheCachesHoldBeforeNewPieces) {
  const Case cases[] = {
      {"joined cached mappings before anything else", mapping(8), {.free = 8, .cached = 8, .joined = true},
       {.whole = Whole::JoinedCachedMappings}, {"reuse joined cached mappings"}},
      {"short of the device: a cached spilled mapping of the size, before its neighbours are taken apart", mapping(8),
       {.free = 2, .spilled_device = 4, .spilled_of_size = true, .host_run = true},
       {.whole = Whole::SpilledOfTheSize}, {"reuse a cached spilled mapping of the size"}},
      {"no device room at all: a premapped host run", mapping(8), {.free = 0, .runs = 16, .host_run = true},
       {.whole = Whole::HostRun}, {"reuse a premapped host run"}},
      {"some device room: new pieces, not a host run", mapping(8), {.free = 2, .host_run = true, .loose = 6},
       {.device = 2, .host = 6}, {}},
      {"new pieces (a slab) never take a whole mapping", pieces(1), {.free = 0, .joined = true, .host_run = true, .loose = 1},
       {.host = 1}, {}},
  };
  for (const Case& c : cases) check(c);
}

TEST(Placement, HostPiecesComeFromLooseChunksThenPremappedRunsThenPinningThenCachedHostMappings) {
  const Case cases[] = {
      {"premapped runs are taken apart before more is pinned", pieces(4), {.free = 0, .runs = 8, .loose = 1, .pinnable = 100},
       {.host = 4}, {"reclaim premapped host runs 3"}},
      {"pinning within the limit when no runs are left", pieces(4), {.free = 0, .loose = 1, .pinnable = 100},
       {.host = 4}, {}},
      {"at the host limit, every cached mapping with host pieces goes", pieces(4),
       {.free = 0, .host_only = 6, .loose = 0, .pinnable = 0},
       {.host = 4}, {"reclaim cached mappings with host pieces 6"}},
      {"both tiers full: refused, and the device pieces taken go back", pieces(4), {.free = 2, .loose = 1, .pinnable = 0},
       {.refused = true}, {"give back"}},
  };
  for (const Case& c : cases) check(c);
}

TEST(Placement, MovesAndSlotsKeepToTheirTier) {
  const Case cases[] = {
      {"a promotion is device memory or nothing, whatever the host has", {Purpose::Promotion, 4, true, true},
       {.free = 1, .growable = 2, .spilled_device = 8, .loose = 100},
       {.refused = true}, {}},
      {"a promotion takes idle memory apart as an allocation would", {Purpose::Promotion, 4, true, true},
       {.free = 1, .growable = 2, .cached = 1, .slabs = 1},
       {.device = 4}, {"reclaim cached mappings 1", "reclaim empty slabs 1", "grow 1"}},
      {"a promotion that must not wait takes nothing apart", {Purpose::Promotion, 4, true, false},
       {.free = 1, .growable = 2, .cached = 8},
       {.refused = true}, {}},
      {"a demotion is host memory or nothing and leaves the device alone", {Purpose::Demotion, 4, true, true},
       {.free = 100, .runs = 2, .loose = 0, .pinnable = 2},
       {.host = 4}, {"reclaim premapped host runs 2"}},
      {"a demotion that must not wait takes no run apart", {Purpose::Demotion, 4, true, false},
       {.runs = 8, .loose = 1, .pinnable = 0},
       {.refused = true}, {}},
      {"a slot grows an extent before idle memory is taken apart into chunks", {Purpose::Slot, 16, true, true},
       {.free = 2, .extent_free = false, .growable = 100, .cached = 16},
       {.device = 16}, {"grow 16"}},
      {"with an extent free, a slot takes it", {Purpose::Slot, 16, true, true},
       {.free = 16, .extent_free = true, .growable = 100, .cached = 16},
       {.device = 16}, {}},
      {"a slot never spills", {Purpose::Slot, 16, true, true}, {.free = 2, .growable = 4, .loose = 100},
       {.refused = true}, {}},
      {"a driver refusal while taking device pieces, no host tier: refused, pieces back", pieces(4, false),
       {.free = 4, .device_refused_after = 2},
       {.refused = true}, {"give back"}},
  };
  for (const Case& c : cases) check(c);
}

TEST(Placement, ReclaimingAllFollowsTheOneOrder) {
  TableStock all({.cached = 1, .slabs = 1, .carved = 1, .spilled_device = 1, .runs = 1, .host_only = 1});
  reclaim_all(all);
  EXPECT_EQ(all.calls(), (std::vector<std::string>{"reclaim cached mappings 1", "reclaim empty slabs 1",
                                                   "reclaim idle carved slots 1",
                                                   "reclaim cached spilled mappings' device pieces 1",
                                                   "reclaim premapped host runs 1", "reclaim cached mappings with host pieces 1"}));
  TableStock device({.cached = 1, .slabs = 1, .carved = 1, .spilled_device = 1, .runs = 1, .host_only = 1});
  reclaim_all(device, kDeviceSources);
  EXPECT_EQ(device.calls().size(), kDeviceSources) << "the program's own cuMemCreate needs device room only";
  EXPECT_EQ(device.now().runs, 1u);
}

}  // namespace
