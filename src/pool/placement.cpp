// The placement rule (placement.h says what it covers; docs/architecture.md, "Placement", why).
#include "pool/placement.h"

#include <algorithm>

namespace uvmpool::pool::placement {
namespace {

// Makes up to n granules free on the device: free pieces, then idle memory in reclaim order, then
// growth. All or nothing: growth only if it covers the whole shortfall (idle memory already taken
// apart stays free: it was idle). Returns how many of the n are free.
std::size_t device_room(Stock& s, std::size_t n, bool all_or_nothing, bool may_reclaim) {
  if (may_reclaim) {
    for (std::size_t i = 0; i < kBeforeGrowth && s.free_device() < n; ++i) s.reclaim(kReclaimOrder[i], n - s.free_device());
  }
  if (const std::size_t free = s.free_device(); free < n) {
    const std::size_t want = n - free;
    const std::size_t can = std::min(want, s.growable());
    // A refusal here (another process took the memory meanwhile) leaves the rest to the host tier.
    if (can == want || (!all_or_nothing && can != 0)) s.grow(can);
  }
  return std::min(s.free_device(), n);
}

// n granules of host pieces: loose chunks, the premapped runs taken apart before anything more is
// pinned (unmapping costs less than pinning), pinning within the host limit, and last every cached
// mapping with host pieces taken apart.
bool host_room(Stock& s, std::size_t n, bool may_reclaim) {
  if (n == 0) return true;
  if (may_reclaim && s.loose_host() < n) s.reclaim(Idle::HostRuns, n - s.loose_host());
  if (s.take_host(n)) return true;
  return may_reclaim && s.reclaim(Idle::AllHostMappings, n) != 0 && s.take_host(n);
}

Plan refused() { return Plan{.refused = true}; }

Plan whole(Whole w) { return Plan{.whole = w}; }

}  // namespace

Plan place(Stock& s, const Ask& a) {
  const std::size_t n = a.granules;
  switch (a.purpose) {
    case Purpose::Promotion: {
      // Device memory or nothing, as an allocation finds it; never a cached spilled mapping taken
      // apart (that would move host pieces the program may be reading).
      if (device_room(s, n, true, a.may_reclaim) < n) return refused();
      if (s.take_device(n) < n) {  // the driver refused a step
        s.give_back();
        return refused();
      }
      return Plan{.device = n};
    }
    case Purpose::Demotion:
      if (!host_room(s, n, a.may_reclaim)) return refused();
      return Plan{.host = n};
    case Purpose::Slot: {
      // A slot is one mapping when it is one extent: with none free, a new one while the budget has
      // room, before idle memory elsewhere is taken apart into the chunks that would map it as many.
      if (!s.free_extent() && s.free_device() < n && s.growable() >= n) s.grow(n);
      if (device_room(s, n, true, a.may_reclaim) < n) return refused();
      if (s.take_device(n) < n) {
        s.give_back();
        return refused();
      }
      return Plan{.device = n};
    }
    case Purpose::Mapping:
    case Purpose::Pieces:
      break;
  }
  const bool mapping = a.purpose == Purpose::Mapping;
  // 1. Idle mappings of other sizes that lie side by side serve with no driver call, before any
  //    chunk is unmapped, grown or spilled.
  if (mapping && s.reuse(Whole::JoinedCachedMappings, n)) return whole(Whole::JoinedCachedMappings);
  // 2. Device memory, first come first served, while the budget lasts.
  std::size_t device = device_room(s, n, !a.host_tier, a.may_reclaim);
  if (device < n && !a.host_tier) return refused();
  if (device < n) {
    // 3. The device cannot hold it all: a cached spilled mapping of this size serves with no driver
    //    call; failing that, the device pieces of cached spilled mappings go to this fresh request
    //    (the spilled ones are not live); and when none of it fits on the device, a premapped run.
    if (mapping && s.reuse(Whole::SpilledOfTheSize, n)) return whole(Whole::SpilledOfTheSize);
    if (a.may_reclaim && s.reclaim(Idle::SpilledMappings, n - device) != 0) device = device_room(s, n, false, a.may_reclaim);
    if (mapping && device == 0 && s.reuse(Whole::HostRun, n)) return whole(Whole::HostRun);
  }
  device = s.take_device(device);  // fewer only where the driver refused a step
  // 4. The rest in host memory.
  if ((device < n && !a.host_tier) || !host_room(s, n - device, a.may_reclaim)) {
    s.give_back();
    return refused();
  }
  return Plan{.device = device, .host = n - device};
}

void reclaim_all(Stock& s, std::size_t sources) {
  for (std::size_t i = 0; i < std::min(sources, kIdleSources); ++i) s.reclaim(kReclaimOrder[i], SIZE_MAX / 2);
}

const char* name(Idle source) {
  switch (source) {
    case Idle::CachedMappings: return "cached mappings";
    case Idle::EmptySlabs: return "empty slabs";
    case Idle::CarvedSlots: return "idle carved slots";
    case Idle::SpilledMappings: return "cached spilled mappings' device pieces";
    case Idle::HostRuns: return "premapped host runs";
    case Idle::AllHostMappings: return "cached mappings with host pieces";
  }
  return "?";
}

const char* name(Whole whole) {
  switch (whole) {
    case Whole::None: return "none";
    case Whole::JoinedCachedMappings: return "joined cached mappings";
    case Whole::SpilledOfTheSize: return "a cached spilled mapping of the size";
    case Whole::HostRun: return "a premapped host run";
  }
  return "?";
}

}  // namespace uvmpool::pool::placement
