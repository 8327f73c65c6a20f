// Carving: allocations that share extents mapped once (issue 15; docs/architecture.md, "Carving").
//
// Why. The driver's mapping calls cost per mapping, not per byte (cuMemSetAccess about 30 us for
// each mapping it covers, of 2 or 32 MiB alike, on an H200), and it maps a handle only whole, from
// offset 0. A pool that gives each allocation mappings of its own therefore pays per allocation it
// builds: on the churn replay (uvmpool-bench-fragmentation, modeled) 2752 piece mappings, most of
// them 2 MiB chunks of allocations smaller than an extent, 28.5x the caching allocator's time. The
// caching allocator and PyTorch's expandable segments pay per segment instead: they map memory once
// and carve allocations out of it. This is that, on the pool's extents.
//
// What. One reserved address range. Extent-sized slots; a slot is either unmapped or mapped with
// pieces that cover it (one extent handle, or chunks where that is what free memory has), each slot
// mapped once and then carved: allocations are byte ranges, rounded up to `unit`, placed best fit
// (smallest free range, then lowest address) among the mapped free space, and may span slots (the
// slots are contiguous in address space). A free gives the range back and merges it with its free
// neighbours: no driver call. Only when nothing fits does the range grow, where growth maps fewest
// slots: a run of unmapped slots (the range's unused end is one) together with the free space on
// either side of it. The extents for those slots come first from idle slots elsewhere (wholly free:
// unmapped there, mapped here, so what the range holds does not grow while it holds idle memory;
// the peer's weakness is that free pages in the middle cannot serve growth at its end), then from
// the source (the pool's free extents, or new ones). Under pressure the pool takes idle slots back
// (release_idle).
//
// Modeled before it was built (scripts/carving-model.py on the churn trace, 64 KiB units, 32 MiB
// extents, idle extents remapped): peak mapped / peak live 1.026, 124 extents made and 24 remapped,
// about 6.2 ms of driver time against the pool's 122 ms.
//
// Locking: none of its own; the caller serializes (the device pool's slow-path lock), as for
// RangeAllocator. The source's calls are made from inside allocate and release_idle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pool/address_map.h"
#include "pool/vmm.h"

namespace uvmpool::pool {

class CarvedRange {
 public:
  // Where the range's physical memory comes from and goes back to, and who is told of its mappings.
  class Source {
   public:
    virtual ~Source() = default;
    // Pieces covering `granules` chunks, unmapped, or OUT_OF_MEMORY (nothing taken).
    virtual CUresult take(std::size_t granules, std::vector<Chunk>* pieces) = 0;
    virtual void give_back(std::span<const Chunk> pieces) = 0;  // unmapped now
    // Before freed memory is unmapped: work queued before its frees may still read it (the pool's
    // fence).
    virtual void before_unmap() = 0;
    // The pieces mapped from va, one after another / the bytes from va unmapped: the address map's
    // entries and tier marks follow.
    virtual void mapped(CUdeviceptr va, std::span<const Chunk> pieces) = 0;
    virtual void unmapped(CUdeviceptr va, std::size_t bytes) = 0;
  };

  // [base, base + bytes): reserved address space, a whole number of extents, chunk-aligned.
  // `extent` and `unit` are powers of two, unit <= chunk <= extent.
  CarvedRange(const Vmm& vmm, Source& source, CUdeviceptr base, std::size_t bytes, std::size_t extent,
              std::size_t chunk, std::size_t unit);
  ~CarvedRange();  // unmaps every slot and gives its pieces back (whatever is still allocated)
  // After fork, in the child: forget every slot without a driver call (the destructor then makes none).
  void abandon() { slots_.clear(); }
  CarvedRange(const CarvedRange&) = delete;
  CarvedRange& operator=(const CarvedRange&) = delete;

  // A range of `bytes` (rounded up to the unit). OUT_OF_MEMORY when neither the mapped free space nor
  // growth can hold it; nothing is lost then (extents taken for it go back to the source, idle slots
  // it unmapped included).
  // `grow` false: the mapped free space only (no driver call, no source call).
  CUresult allocate(std::size_t bytes, CUdeviceptr* out, bool grow = true);
  // INVALID_VALUE, nothing changed, when p is not the start of a live allocation (a double free, an
  // interior or foreign pointer).
  CUresult free(CUdeviceptr p);

  struct Found {
    CUdeviceptr start = 0;
    std::size_t bytes = 0;  // rounded up to the unit
  };
  std::optional<Found> find(CUdeviceptr p) const;  // the live allocation holding p
  bool contains(CUdeviceptr p) const { return p >= base_ && p < base_ + slots_.size() * extent_; }

  // The pieces of the slots that [start, start + bytes) lies in, in address order, and where the
  // first of them is mapped (CUDA IPC exports them; chunks_of).
  std::vector<Chunk> pieces_of(CUdeviceptr start, std::size_t bytes, CUdeviceptr* first) const;
  // Every mapped slot: its address and pieces (the pool's invariants).
  void for_each_mapped(const std::function<void(CUdeviceptr, std::span<const Chunk>)>& visit) const;
  std::size_t idle_slots() const { return idle_; }  // mapped, nothing allocated in them
  std::size_t extent() const { return extent_; }

  // Unmaps up to `slots` idle slots (wholly free), highest address first, and gives their pieces
  // back; how many.
  std::size_t release_idle(std::size_t slots);

  struct Figures {
    std::size_t slots_mapped = 0;
    std::size_t slots_idle = 0;     // mapped, nothing allocated in them
    std::size_t peak_slots_mapped = 0;
    std::uint64_t live_bytes = 0;   // allocated, rounded up to the unit
    std::uint64_t allocations = 0;  // live
    std::uint64_t taken = 0;        // slots mapped with pieces from the source
    std::uint64_t remapped = 0;     // idle slots moved to where growth needed them
    std::uint64_t released = 0;     // idle slots given back (release_idle)
  };
  Figures figures() const;
  // Every figure recomputed from the structures; the differences, one per line ("" when none).
  std::string check_invariants() const;

 private:
  struct Slot {
    std::vector<Chunk> pieces;  // empty: unmapped
    std::uint64_t used = 0;     // bytes of live allocations inside it
  };
  // Where a grown allocation goes: [start, start + bytes) over the unmapped slots [first, first + count)
  // and free mapped space around them.
  struct Window {
    CUdeviceptr start = 0;
    std::size_t first = 0, count = 0;
  };
  std::optional<Window> place(std::size_t bytes) const;
  CUresult grow(const Window& w, std::size_t bytes);
  void unmap_slot(std::size_t i);
  void count_use(CUdeviceptr start, std::size_t bytes, bool add);
  CUdeviceptr slot_va(std::size_t i) const { return base_ + i * extent_; }

  const Vmm& vmm_;
  Source& source_;
  const CUdeviceptr base_;
  const std::size_t extent_, chunk_, unit_;
  std::vector<Slot> slots_;
  RangeAllocator free_;                       // mapped free space
  std::map<CUdeviceptr, std::size_t> live_;  // allocation start -> bytes (rounded)
  Figures figures_;
  std::size_t mapped_ = 0, idle_ = 0;  // slots
};

}  // namespace uvmpool::pool
