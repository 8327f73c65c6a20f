// A device pool's figures: one part of it (device_pool.h), and the one place they are declared.
//
// Relaxed atomics, read without a lock by stats(), the budget (growable chunks), cuMemGetInfo and
// tiering's room, never by a decision that needs them exact; each is written on the path named beside
// it, under the lock named there (a plain load and store where the writer holds that lock: `bump`).
// check_invariants (invariants.cpp, tests) recomputes the ones that describe the structures and
// compares. Units: granules (the pool's chunk size) unless bytes or a count is said.
#pragma once

#include <atomic>
#include <cstdint>

#include "pool/size_classes.h"

namespace uvmpool::pool {

struct DeviceFigures {
  using Counter = std::atomic<std::uint64_t>;

  // Physical memory (chunks.cpp, under mu_): what the pool holds of the device, in any shape.
  Counter chunks_held{0};     // device granules held: free, mapped, cached, carved
  Counter chunks_free{0};     // of those, in free chunks, extents and runs
  Counter chunks_cached{0};   // of those, idle in cached mappings (their device pieces) and empty device slabs
  Counter extents_held{0};    // device pieces of more than one chunk (extents and runs)
  Counter peak_held{0};       // bytes, the most chunks_held ever came to
  Counter created{0};         // granules made with cuMemCreate, and given back
  Counter released{0};
  Counter address_space{0};   // bytes of virtual address space reserved
  Counter stitched_maps{0};   // mappings built of pieces (large, premapped host run, carved slot)

  // Allocations (large_blocks.cpp, slabs.cpp, stream_reuse.cpp; under the bin or class lock taken
  // anyway on the fast paths, else atomically).
  Counter live_bytes{0};       // bytes asked for by live allocations, both tiers
  Counter live_host_bytes{0};  // of those, bytes lying in host pieces (moves change it: swap_pieces)
  // Statistics only (PoolConfig::counters): no decision reads these.
  Counter cache_hits{0};
  Counter repeat_places_kept{0}, repeat_places_missed{0};  // DeviceStats's
  Counter allocations[kSizeBuckets] = {};  // by size_bucket of the bytes asked for
  Counter frees{0};
  Counter peak_live{0}, peak_live_device{0}, peak_live_host{0};  // bytes
  Counter broken{0};          // cached mappings taken apart or shrunk
  Counter cut_or_joined{0};   // cache hits cut from or joined of cached mappings (cached_ranges.cpp)
  Counter oom{0};             // requests answered OUT_OF_MEMORY
  // (The mapping cache counts its own hits and frees, under its bins' locks: MappingCache::add_counts.)

  // The host tier (under mu_, or the spilled bins' lock where a cached mapping comes and goes).
  Counter host_mapped{0};      // host chunks in mappings, live or cached
  Counter host_cached{0};      // host chunks in cached mappings
  Counter spilled{0};          // allocations (and the program's own handles) placed partly in host memory
  // The program's own cuMemCreate (chunks.cpp, admit_external / external_released).
  Counter external_device{0};  // bytes on the device
  Counter external_host{0};    // bytes placed in host memory instead
  Counter others_seen{0};      // bytes used by anyone else, as last read from the driver (others_bytes)

  // Moves (move.cpp, under mu_ at the commit).
  Counter moved_to_device{0}, moved_to_host{0};  // bytes
  // Of those, the bytes of live allocations: a carved slot moves whole, with free space and memory
  // freed but not yet reused in it, so the difference is what moved for nothing.
  Counter moved_live_to_device{0}, moved_live_to_host{0};
  Counter moved_uncopied{0};  // bytes of committed moves of freed memory whose copy was left out (copy_move)
  Counter moves{0}, moves_failed{0}, moves_in_flight{0};
  Counter move_unmapped{0}, move_mapped{0};      // mappings the commits' remaps changed
  Counter move_commit_ns{0};  // host time in the committed moves' commits (Vmm::remap and the bookkeeping)
  Counter move_remap_ns{0};   // of that, and in failed remaps, in Vmm::remap: the driver's calls
  // Of move_remap_ns, by call and by the tier of the pieces it acted on (Vmm's RemapTimes, indexed by
  // Tier): a host mapping costs per byte, a device one per call.
  Counter move_unmap_ns[2] = {}, move_map_ns[2] = {}, move_access_ns[2] = {};

  // Carving (carving.cpp, under mu_, from the range's own figures: note_carved_idle).
  Counter carved_idle{0};      // device granules in idle carved slots (idle memory, as cached)
  Counter carved_mapped{0}, carved_live{0};  // bytes
  // Statistics only: carved allocations and frees (try_carve, free_carved), under mu_, which those
  // paths hold anyway: bumped with a plain load and store, as the bins and slab classes count theirs
  // (a lock-prefixed add on each pair cost 5% of a carved pair's time; uvmpool-bench-alloc).
  Counter carved_allocations[kSizeBuckets] = {};
  Counter carved_frees{0};
};

}  // namespace uvmpool::pool
