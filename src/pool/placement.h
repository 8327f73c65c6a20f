// Placement: where each piece of memory a device pool hands out comes from, and the one order in
// which the pool takes its idle memory apart.
//
// Every request the pool serves from new pieces goes through place(): a large allocation's mapping,
// a slab's chunk, a guarded mapping, a carved slot, and a move's target in either tier (tiering's
// promotions and demotions). The program's own cuMemCreate (admit) and release_idle reclaim through
// the same order. The rule reads top to bottom in placement.cpp; the pool carries it out through a
// Stock (DevicePool::PoolStock, stock.cpp), which owns the mechanisms (taking a cached mapping apart,
// growing within the budget, pinning host chunks) and decides nothing. The rule sees only quantities
// and answers, so it is tested on its own against tables of situations (tests/pool/placement_test.cpp).
//
// The rule, in short (docs/architecture.md, "Placement"):
//   1. Device memory first, first come first served, within the budget: free pieces, then idle
//      memory in reclaim order (cached mappings, empty slabs, idle carved slots), then growth.
//   2. Short of the device: a mapping that serves the request whole with no driver call (a cached
//      spilled mapping of the size), then the device pieces of cached spilled mappings, then, with no
//      device room at all, a premapped host run.
//   3. The rest in host memory: loose reserve chunks, premapped runs taken apart, pinning within the
//      host limit, then every cached mapping with host pieces taken apart.
//   Moves and carved slots differ only where written: a promotion or a slot is device memory or
//   nothing; a demotion is host memory or nothing; a move that must not wait takes nothing apart.
//
// Lock: the caller holds the device pool's mu_ across place(); the rule keeps no state of its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace uvmpool::pool::placement {

// What the pieces are for.
enum class Purpose : std::uint8_t {
  Mapping,    // a large allocation's new mapping: a cached mapping may serve it whole instead
  Pieces,     // new pieces only, device first then host: a slab's chunk, a guarded mapping
  Slot,       // a carved slot: device memory only, one extent if it can be
  Promotion,  // a move's target on the device
  Demotion,   // a move's target in host memory (what the host extents of its shape left: move.cpp)
};

// Idle memory the pool holds, each a source the stock can take apart.
enum class Idle : std::uint8_t {
  CachedMappings,    // freed device mappings binned for reuse: least recently freed of the smallest covering size first
  EmptySlabs,        // slabs with no slot in use: their chunks
  CarvedSlots,       // carved slots holding no allocation
  SpilledMappings,   // cached mappings with device and host pieces: frees their device pieces
  HostRuns,          // host runs the reserve thread mapped ahead: their chunks loose again
  AllHostMappings,   // every cached mapping with host pieces, wholly host ones and premapped runs included
};
inline constexpr std::size_t kIdleSources = 6;

// The one reclaim order: the cheapest to rebuild first, the device's sources before the host's. The
// first three are taken apart before the pool grows; cached spilled mappings only when growth is not
// enough, since one may serve a later spilled request of its size whole.
inline constexpr std::array<Idle, kIdleSources> kReclaimOrder{Idle::CachedMappings, Idle::EmptySlabs, Idle::CarvedSlots,
                                                              Idle::SpilledMappings, Idle::HostRuns,
                                                              Idle::AllHostMappings};
inline constexpr std::size_t kBeforeGrowth = 3;  // kReclaimOrder's sources taken apart before growth
inline constexpr std::size_t kDeviceSources = 4;  // ... and the ones that free device memory

// A mapping the pool already holds that serves a Mapping request whole.
enum class Whole : std::uint8_t {
  None,
  JoinedCachedMappings,  // cached mappings side by side in address space, joined (no driver call)
  SpilledOfTheSize,      // a cached spilled mapping of exactly the size
  HostRun,               // a premapped run of host chunks, cut to the size
};

const char* name(Idle source);
const char* name(Whole whole);

// What the rule asks of the pool. Quantities are granules (the pool's chunk size); every call runs
// under the device pool's mu_.
class Stock {
 public:
  virtual ~Stock() = default;
  virtual std::size_t free_device() = 0;   // free on the device now (chunks, extents, runs)
  virtual bool free_extent() = 0;          // a free piece of one extent is among them
  virtual std::size_t growable() = 0;      // what the budget lets the pool add now
  virtual void grow(std::size_t granules) = 0;  // new device pieces, free; a refusal leaves fewer
  // Takes idle memory of `source` apart until about `granules` are given up (device memory made free,
  // or host chunks made loose); returns what it gave up, 0 when it had none.
  virtual std::size_t reclaim(Idle source, std::size_t granules) = 0;
  virtual bool reuse(Whole whole, std::size_t granules) = 0;  // the mapping taken for the request, if one is held
  // Moves `granules` free device granules into the request's pieces (whole extents first); fewer
  // only where the driver refused a step.
  virtual std::size_t take_device(std::size_t granules) = 0;
  virtual std::size_t loose_host() = 0;    // host chunks pinned and in no mapping
  // Host pieces for `granules` into the request: loose chunks, pinning more within the host limit;
  // all or nothing.
  virtual bool take_host(std::size_t granules) = 0;
  virtual void give_back() = 0;            // every piece taken for the request so far
};

struct Ask {
  Purpose purpose = Purpose::Pieces;
  std::size_t granules = 0;
  bool host_tier = false;    // spilling is on for the device
  bool may_reclaim = true;   // false: a move that must not wait for a fence takes nothing apart
};

struct Plan {
  bool refused = false;        // OUT_OF_MEMORY: nothing taken (idle memory may have been reclaimed)
  Whole whole = Whole::None;   // served whole by a mapping the stock took
  std::size_t device = 0;      // granules of device pieces taken
  std::size_t host = 0;        // granules of host pieces taken
};

// Takes the pieces for `ask` from `stock`, or a whole mapping, or nothing (refused).
Plan place(Stock& stock, const Ask& ask);

// Every idle source in reclaim order, entirely (release_idle; the device's sources only for the
// program's own cuMemCreate, whose room is device memory).
void reclaim_all(Stock& stock, std::size_t sources = kIdleSources);

}  // namespace uvmpool::pool::placement
