// Advice and prefetches on pool memory: cuMemAdvise and cuMemPrefetchAsync (both forms), and the
// public uvmpool_advise / uvmpool_prefetch (docs/tiering.md "Advice and prefetches").
//
// A driver takes both only for managed memory, and answers INVALID_VALUE for the device memory the
// pool is made of. Programs written for managed memory call them on what they allocated with
// cudaMalloc all the same, and tiering can act on them, so uvmpool answers them for pool memory:
//
//   - a prefetch asks the mover to move the range's pieces to the tier named, at its next epoch. The
//     epoch holds every stream of the program, so the move comes after all the work queued before the
//     call, on the stream named and on every other; work queued after may run before or after it.
//     Addresses never change, so either way only speed depends on it. Memory of one device cannot move
//     to another: a prefetch to another device is accepted and moves nothing.
//   - a preferred location is kept per allocation and read by the policy (policy.h): memory that
//     prefers the device is never demoted to make room, memory that prefers the host is never
//     promoted (it is read in place) and is the first to go when room is needed. Allocations that
//     share a carved slot move together, so the slot answers to them together (AdviceTable::shared):
//     kept on the device while any of them prefers it, kept in host memory only while all of them do.
//   - read-mostly and accessed-by are accepted and change nothing. Read-mostly would keep the host
//     copy of promoted memory so that demoting it costs no copy, but uvmpool cannot tell a kernel's
//     reads from its writes (a write through any pointer would have to drop that copy), so keeping it
//     could hand stale bytes back; accessed-by is what cuCtxEnablePeerAccess already gives pool
//     memory (src/pool/peer_access.h).
//
// The range must lie in live pool allocations without a gap, as the driver wants it to lie in managed
// memory; then uvmpool answers, whatever UVMPOOL_TIERING says (with it off or remote nothing moves).
// A range that is not pool memory is the driver's to answer (nullopt).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "pool/pool.h"
#include "tiering/policy.h"

namespace uvmpool::tiering {

class Tiering;

// A location named by a call: a tier, and for device memory the device.
struct Place {
  pool::Tier tier = pool::Tier::Device;
  int device = 0;  // for Tier::Device
};
// CUmemLocation as the second forms pass it; nullopt for one the driver refuses (INVALID_VALUE).
std::optional<Place> place_of(const CUmemLocation& where);
// A CUdevice as the first forms pass it: CU_DEVICE_CPU is the host, any other a device (one that does
// not exist is refused later, with INVALID_DEVICE, as the driver does).
Place place_of(CUdevice device);

// What uvmpool answers for cuMemAdvise / cuMemPrefetchAsync on [p, p + bytes) of `pool`'s memory
// (`tiering` null: tiering is off), given the process's `devices`; nullopt when p is not pool memory.
// `where` is nullopt when the call named a location the driver refuses. `acted`, if given, says
// whether a successful call had an effect: a preferred location kept, a move asked of the mover.
std::optional<CUresult> advise(pool::Pool& pool, Tiering* tiering, int devices, CUdeviceptr p, std::size_t bytes,
                               CUmem_advise advice, std::optional<Place> where, bool* acted = nullptr);
std::optional<CUresult> prefetch(pool::Pool& pool, Tiering* tiering, int devices, CUdeviceptr p, std::size_t bytes,
                                 std::optional<Place> where, unsigned flags, bool* acted = nullptr);

// cuMemPrefetchBatchAsync (CUDA 13): `count` ranges, range j going to the location whose index in
// `loc_first` is the last not above j. The ranges in the pool's space are answered as prefetch()
// answers one; the others are handed to `forward` as a batch of their own (the same shape: ranges,
// locations and their first indices), first, so that a batch the driver refuses is refused before
// any pool memory moves. nullopt: no range is pool memory, or the call is malformed (null arrays, no
// location, first indices not starting at 0 or not rising, flags the driver defines none of): the
// caller forwards it as made, and the driver answers.
using BatchForward = std::function<CUresult(std::vector<CUdeviceptr>& ptrs, std::vector<std::size_t>& sizes,
                                            std::vector<CUmemLocation>& locations, std::vector<std::size_t>& first)>;
std::optional<CUresult> prefetch_batch(pool::Pool& pool, Tiering* tiering, int devices, const CUdeviceptr* ptrs,
                                       const std::size_t* sizes, std::size_t count, const CUmemLocation* locations,
                                       const std::size_t* loc_first, std::size_t loc_count, unsigned long long flags,
                                       const BatchForward& forward);

// The same for the process: its pool and tiering, the driver's device count. nullopt also before the
// pool exists (no pool memory yet).
std::optional<CUresult> advise(CUdeviceptr p, std::size_t bytes, CUmem_advise advice, std::optional<Place> where,
                               bool* acted = nullptr);
std::optional<CUresult> prefetch(CUdeviceptr p, std::size_t bytes, std::optional<Place> where, unsigned flags,
                                 bool* acted = nullptr);
std::optional<CUresult> prefetch_batch(const CUdeviceptr* ptrs, const std::size_t* sizes, std::size_t count,
                                       const CUmemLocation* locations, const std::size_t* loc_first,
                                       std::size_t loc_count, unsigned long long flags, const BatchForward& forward);

// The preferred locations given, per allocation. An entry names its allocation by base and buffer id,
// which is never reused, so advice on a freed allocation never reaches one made later at its address.
class AdviceTable {
 public:
  void prefer(const pool::AllocationInfo& allocation, Preference preference);
  // The allocation's preference; two loads while no advice was ever given.
  Preference preference(const pool::AllocationInfo& allocation) const;
  // The preference of memory that moves with all of `allocations` at once (a carved slot: pool.h's
  // carved_slot_allocations): the device where any of them prefers it, since demoting the slot would
  // demote that one too; the host only where every one prefers it, since a slot kept in host memory
  // is read in place by all of them; else none. One load while no advice was ever given.
  Preference shared(std::span<const pool::AllocationInfo> allocations) const;
  bool any() const { return any_.load(std::memory_order_acquire); }
  // Entries of freed allocations are dropped once the table doubles: `live` says which still are.
  template <class Live>
  void prune(Live live) {
    MutexLock lock(mu_);
    if (entries_.size() < prune_at_) return;
    std::erase_if(entries_, [&](const auto& e) { return !live(e.first, e.second.buffer_id); });
    prune_at_ = std::max<std::size_t>(kFirstPrune, 2 * entries_.size());
  }
  std::size_t size() const {
    MutexLock lock(mu_);
    return entries_.size();
  }

 private:
  static constexpr std::size_t kFirstPrune = 1024;
  struct Entry {
    std::uint64_t buffer_id = 0;
    Preference preference = Preference::None;
  };
  mutable Mutex mu_;
  std::unordered_map<CUdeviceptr, Entry> entries_ UVMPOOL_GUARDED_BY(mu_);
  std::size_t prune_at_ UVMPOOL_GUARDED_BY(mu_) = kFirstPrune;
  std::atomic<bool> any_{false};  // set once the first advice is given: launches look no further until then
};

}  // namespace uvmpool::tiering
