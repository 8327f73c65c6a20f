// A device pool's size classes of small allocations: one part of it (device_pool.h), with a lock per
// class. Each class lists its slabs that have a free slot (a slab is one chunk mapped on its own and
// cut into equal slots, slabs.cpp); a slab leaves the list when its last slot is taken or while its
// chunk moves between the tiers (move.cpp), and comes back when a slot is freed or the move ends (its
// slots may be freed meanwhile).
// One empty slab per class stays listed for the next allocation; a second one freed empty is handed
// back to the pool to take apart. Empty listed slabs on the device count as cached device memory
// (DeviceFigures::chunks_cached): idle, the pool's to reclaim (take_empty).
//
// The part keeps the lists, each slab's slot bits and counts, and the class figures; making a slab,
// mapping it and taking it apart are the pool's (slabs.cpp). Lock order: a class lock is taken alone
// or inside the pool's mu_, never two at once, and never held across a driver call. A slab's class
// (Slab::cls) changes only when the pool recycles a dead slab under mu_: a caller without mu_ finds
// the class lock by a loop (DevicePool::free_small).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/thread_safety.h"
#include "pool/device_figures.h"

namespace uvmpool::pool {

struct Slab;
struct DeviceStats;

class SlabClasses {
 public:
  struct Class {
    Mutex mu;
    Slab* head UVMPOOL_GUARDED_BY(mu) = nullptr;   // slabs with a free slot, most recently listed first
    std::size_t empty UVMPOOL_GUARDED_BY(mu) = 0;  // of those, slabs with no slot in use
    std::atomic<std::uint64_t> allocations{0};     // statistics, counted under mu
    std::atomic<std::uint64_t> frees{0};
  };

  explicit SlabClasses(DeviceFigures& fig);

  Class& of(int cls) { return classes_[cls]; }
  Class& of(const Slab* s);  // its class now (see the top: stable under the pool's mu_ or the class lock)

  // A free slot of the first listed slab, marked taken (the slab in *slab); false: none listed.
  bool take_slot(Class& c, Slab** slab, std::uint32_t* slot) UVMPOOL_REQUIRES(c.mu);
  void add(Class& c, Slab* s) UVMPOOL_REQUIRES(c.mu);  // a new slab, empty
  // The slot is free again (its SlotInfo cleared); true: the slab was a second empty one of its class,
  // now off the list and dead, for the pool to take apart (destroy_slab, under mu_). A slab moving
  // stays off the list and alive: the move's end lists it.
  bool free_slot(Class& c, Slab* s, std::uint32_t slot) UVMPOOL_REQUIRES(c.mu);
  // A move of the slab's chunk begins (off the list: no slot is handed out from it, and none of its
  // frees gives it back) and ends (back on it, counted empty if its frees emptied it).
  void claim(Class& c, Slab* s) UVMPOOL_REQUIRES(c.mu);
  void unclaim(Class& c, Slab* s) UVMPOOL_REQUIRES(c.mu);
  // Every listed empty slab, off the lists and dead, for the pool to take apart.
  std::vector<Slab*> take_empty();
  void add_counts(DeviceStats& s) const;

 private:
  static void link(Slab*& head, Slab* s);
  static void unlink(Slab*& head, Slab* s);
  // An empty slab on the device is cached device memory while listed.
  void count_cached(const Slab* s, int delta);

  DeviceFigures& fig_;
  std::unique_ptr<Class[]> classes_;
};

}  // namespace uvmpool::pool
