// Carving: allocations that share extents mapped once (issue 15; docs/architecture.md, "Carving").
//
// Why. The driver's mapping calls on device memory cost per mapping, not per byte (cuMemSetAccess
// about 30 us for each mapping it covers, of 2 or 32 MiB alike, on an H200), and it maps a handle
// only whole, from offset 0. A pool that gives each allocation mappings of its own therefore pays
// per allocation it builds: on the churn replay (uvmpool-bench-fragmentation, modeled) 2752 piece
// mappings, most of them 2 MiB chunks of allocations smaller than an extent, 28.5x the caching
// allocator's time. The caching allocator and PyTorch's expandable segments pay per segment
// instead: they map memory once and carve allocations out of it. This is that, on the pool's
// extents.
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
// Two lanes. Small requests (at most `small_max`, a sixteenth of an extent unless told) are carved
// only from slots of the small lane, larger ones only from slots of the large lane; a slot takes its
// lane when it is mapped for a request, and an idle slot changes lane without a driver call. Why:
// tiering moves a slot whole, so what shares a slot shares its tier. Carved best fit, a model's small
// per-layer tensors (a KV cache, norms, biases) filled the gaps beside its large weights, one or two
// in every slot, and a slot with a hot small tensor in it kept a cold weight on the device or
// dragged it along (modeled, `UVMPOOL_CARVE_MAX=64M uvmpool-bench-tiering --workloads=batched`:
// 55.1 ms a step against 27.4 stitched; with the KV cache allocated after the weights, 36.5). Size is
// what an allocator knows of a request; it is also the usual proxy for how alike uses are (mimalloc's
// and the caching allocator's small and large pools).
//
// Groups. Where growth maps new memory to slots that one request covers whole, they share one
// handle, mapped once: up to UVMPOOL_CARVE_GROUP of them (kGroupSlots by default). The driver's
// mapping calls on device memory cost per mapping, not per byte, and much of the churn replay's
// growth is several slots at once (a large request at the range's end: 93 of its 143 slot
// mappings), so this takes its modeled time from 1.52x the caching allocator's to 1.04x, at a peak
// of 1.042 against 1.050 (docs/benchmarks.md). What a shared handle costs: a handle maps only
// whole, so a group is unmapped whole (given back once every member is idle; moved to where growth
// needs it only whole, into a window with room for all of it), and the first move of any member
// moves them all; the move's target is pieces of a slot each, so the group is no more after it, and
// later moves are a slot's again. Why only slots covered whole: they fall idle together when the
// request is freed, where a slot at either end is shared with neighbours and may stay in use
// (grouping every new slot: peak 1.075). Each member's `pieces` is its share, the handle and a
// slot's granules, so what counts per slot (tiers, idle slots, invariants) is as for a slot of its
// own; the mapping itself (mapping_pieces) is the handle whole, at the group's first slot.
//
// Modeled before it was built (scripts/carving-model.py on the churn trace, 64 KiB units, 32 MiB
// extents, idle extents remapped): peak mapped / peak live 1.026, 124 extents made and 24 remapped,
// about 6.2 ms of driver time against the pool's 122 ms.
//
// Locking: none of its own; the caller serializes (the device pool's slow-path lock), as for
// RangeAllocator. The source's calls are made from inside allocate and release_idle.
#pragma once

#include <array>
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
    // One new device handle of `granules` for a group ("Groups" above), or OUT_OF_MEMORY (nothing
    // taken): a source that would have to take anything apart for it, or that has free extents to use
    // first, says no, and the slots are taken one at a time. By default there are no groups.
    virtual CUresult take_group(std::size_t granules, Chunk* piece) {
      (void)granules;
      (void)piece;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    virtual void give_back(std::span<const Chunk> pieces) = 0;  // unmapped now
    // Before freed memory is unmapped: work queued before its frees may still read it (the pool's
    // fence).
    virtual void before_unmap() = 0;
    // The pieces mapped from va, one after another / the bytes from va unmapped: the address map's
    // entries and tier marks follow.
    virtual void mapped(CUdeviceptr va, std::span<const Chunk> pieces) = 0;
    virtual void unmapped(CUdeviceptr va, std::span<const Chunk> pieces) = 0;
  };

  // [base, base + bytes): reserved address space, a whole number of extents, chunk-aligned.
  // `extent` and `unit` are powers of two, unit <= chunk <= extent.
  // `small_max` 0: a sixteenth of the extent (see "Two lanes" above). `group_max`: slots a group holds
  // at most, 1 for none ("Groups" above; UVMPOOL_CARVE_GROUP).
  CarvedRange(const Vmm& vmm, Source& source, CUdeviceptr base, std::size_t bytes, std::size_t extent,
              std::size_t chunk, std::size_t unit, std::size_t small_max = 0, std::size_t group_max = kGroupSlots);
  ~CarvedRange();  // unmaps every slot and gives its pieces back (whatever is still allocated)
  // After fork, in the child: forget every slot without a driver call (the destructor then makes none).
  void abandon() { slots_.clear(); }
  CarvedRange(const CarvedRange&) = delete;
  CarvedRange& operator=(const CarvedRange&) = delete;

  // A range of `bytes` (rounded up to the unit). OUT_OF_MEMORY when neither the mapped free space nor
  // growth can hold it; nothing is lost then (extents taken for it go back to the source, idle slots
  // it unmapped included).
  // `grow` false: the mapped free space only (no driver call, no source call). `hint.wants`: at the
  // first of those addresses that the mapped free space of its lane holds it at, else placed as any
  // other (0s are no wish), leaving the free space `hint.avoid` refuses to others if other space fits.
  struct Hint {
    std::span<const CUdeviceptr> wants;
    RangeAllocator::Avoid avoid;
  };
  CUresult allocate(std::size_t bytes, CUdeviceptr* out, bool grow = true, const Hint& hint = {});
  // INVALID_VALUE, nothing changed, when p is not the start of a live allocation (a double free, an
  // interior or foreign pointer).
  CUresult free(CUdeviceptr p);

  struct Found {
    CUdeviceptr start = 0;
    std::size_t bytes = 0;  // rounded up to the unit
  };
  std::optional<Found> find(CUdeviceptr p) const;  // the live allocation holding p
  bool contains(CUdeviceptr p) const { return p >= base_ && p < base_ + slots_.size() * extent_; }

  // The pieces of the mappings that [start, start + bytes) lies in, in address order, and where the
  // first of them is mapped (CUDA IPC exports them; chunks_of). A group's is its handle whole.
  std::vector<Chunk> pieces_of(CUdeviceptr start, std::size_t bytes, CUdeviceptr* first) const;
  // Every mapping: its address and pieces (a group's once, its handle whole; the pool's invariants).
  void for_each_mapped(const std::function<void(CUdeviceptr, std::span<const Chunk>)>& visit) const;
  std::size_t idle_slots() const { return idle_; }  // mapped on the device, nothing allocated in them
  std::size_t extent() const { return extent_; }

  // Unmaps up to `slots` idle device slots (wholly free), highest address first, and gives their
  // pieces back; how many.
  std::size_t release_idle(std::size_t slots);

  // Moves (the pool's move.cpp sequences them; carved_moves.cpp): a slot changes tier at its address,
  // with every allocation in it, and a group's members all at once (its handle maps whole). The target
  // is pieces of a slot each: no piece may span two slots, since each slot is unmapped on its own later
  // (splits_into_slots), so a moved group is a group no more. While a slot lies in host memory its free space takes
  // no new allocation (the range would hand out host memory while the device has room): it is
  // withheld, and comes back when the slot does. A slot that holds no allocation any more in host
  // memory is given back (release_idle_host).
  // The slot p lies in: its index, or none outside the range or in an unmapped slot.
  std::optional<std::size_t> slot_of(CUdeviceptr p) const;
  CUdeviceptr slot_start(std::size_t slot) const { return slot_va(slot); }
  std::span<const Chunk> slot_pieces(std::size_t slot) const { return slots_[slot].pieces; }
  // The mapping slot `slot` lies in: its first slot and how many (a group's members, or the slot
  // alone), and its pieces (a group's handle whole).
  std::size_t mapping_first(std::size_t slot) const { return slot - slots_[slot].group_index; }
  std::size_t mapping_slots(std::size_t slot) const { return slots_[slot].group_slots; }
  std::vector<Chunk> mapping_pieces(std::size_t first) const;
  // Whether `pieces`, laid out from a slot's start, end at every slot boundary they cross (a move's
  // target for a group: each member then takes its own).
  bool splits_into_slots(std::span<const Chunk> pieces) const;
  // Claims the mapping `slot` lies in for a move, every slot of it: NOT_READY when one is under way,
  // NOT_PERMITTED once exported (another process maps its handles). While claimed no idle-slot reuse
  // or release unmaps it.
  CUresult claim(std::size_t slot);
  void unclaim(std::size_t slot);  // that slot only (a moved group is one no more)
  // Every slot of the mapping whose first slot is `first` (a move refused before it changed anything).
  void unclaim_mapping(std::size_t first) {
    for (std::size_t k = first; k < first + slots_[first].group_slots; ++k) unclaim(k);
  }
  bool moving(CUdeviceptr start, std::size_t bytes) const;  // whether a slot under [start, +bytes) is claimed
  // CUDA IPC hands out the slots under [start, +bytes): they never move again while mapped.
  void mark_exported(CUdeviceptr start, std::size_t bytes);
  // The caller remapped the claimed mapping whose first slot is `first` onto `pieces` (the other tier;
  // a group's: splits_into_slots, each member its own now): each slot's free space is withheld (now in
  // host memory) or given back (on the device again).
  void swapped(std::size_t first, std::vector<Chunk> pieces);
  std::size_t idle_host_slots() const { return idle_host_; }
  // Unmaps every slot in host memory that holds no allocation and is not claimed, and gives its pieces
  // back; how many.
  std::size_t release_idle_host();

  enum class Lane : std::uint8_t { Small, Large };
  Lane lane_for(std::size_t bytes) const { return bytes <= small_max_ ? Lane::Small : Lane::Large; }
  // The lane of a mapped slot.
  Lane slot_lane(std::size_t slot) const { return slots_[slot].lane; }

  struct Figures {
    std::size_t slots_mapped = 0;
    std::size_t slots_idle = 0;     // mapped on the device, nothing allocated in them
    std::size_t slots_host = 0;     // mapped with host memory (moved there)
    std::size_t peak_slots_mapped = 0;
    std::uint64_t live_bytes = 0;   // allocated, rounded up to the unit
    std::uint64_t allocations = 0;  // live
    std::uint64_t taken = 0;        // slots mapped with pieces from the source
    std::uint64_t remapped = 0;     // idle slots moved to where growth needed them
    std::uint64_t released = 0;     // idle slots given back (release_idle)
    std::uint64_t relaned = 0;      // idle slots that changed lane
    std::uint64_t groups = 0;       // groups grown (one handle for several slots)
    std::uint64_t retired = 0;      // slots out of use after a failed unmap (Slot::retired)
  };
  // Slots a group holds at most, by default (UVMPOOL_CARVE_GROUP). Why 4 (128 MiB with 32 MiB slots),
  // on the churn replay (modeled): with 2, 1.19x the caching allocator's time; with 4, 1.04x; with 8,
  // 0.97x but a peak of 1.075, as an idle group larger than most windows stays where it is. And a
  // group's first move carries all of it.
  static constexpr std::size_t kGroupSlots = 4;
  Figures figures() const;
  // Every figure recomputed from the structures; the differences, one per line ("" when none).
  std::string check_invariants() const;

 private:
  struct Slot {
    std::vector<Chunk> pieces;  // empty: unmapped
    std::uint64_t used = 0;     // bytes of live allocations inside it
    bool moving = false;        // claimed by a move
    bool exported = false;      // its handles handed to CUDA IPC (until it is unmapped)
    // Out of use for good: an unmap failed and mapping back failed too (Vmm::Unmapped::Partly), so
    // its range is partly mapped. It keeps its pieces (given back only with the range) and no free
    // space: nothing is placed in it, it is never idle and never grown over.
    bool retired = false;
    Lane lane = Lane::Large;    // which requests its free space serves (while mapped)
    // A group's members ("Groups" above): how many, and this one's place; 1 and 0 for a slot alone.
    std::uint32_t group_slots = 1, group_index = 0;
    bool on_host() const { return !pieces.empty() && pieces.front().tier == Tier::Host; }
  };
  // What the idle counts see of a slot: wholly free, on the device (idle memory) or in host memory
  // (to give back).
  enum class Idle : std::uint8_t { No, Device, Host };
  static Idle idle_kind(const Slot& s) {
    if (s.pieces.empty() || s.used != 0 || s.retired) return Idle::No;
    return s.on_host() ? Idle::Host : Idle::Device;
  }
  // Keeps idle_ and idle_host_ right across a change to slot `i` (`was`: its idle_kind before).
  void recount(std::size_t i, Idle was);
  // The free space of slot i: the gaps between the allocations that lie in it.
  std::vector<std::pair<CUdeviceptr, std::size_t>> gaps(std::size_t i) const;
  std::uint64_t withheld_bytes() const;  // free space of slots in host memory
  // Where a grown allocation goes: [start, start + bytes) over the unmapped slots [first, first + count)
  // and free mapped space around them.
  struct Window {
    CUdeviceptr start = 0;
    std::size_t first = 0, count = 0;
  };
  std::optional<Window> place(std::size_t bytes, Lane lane) const;
  CUresult grow(const Window& w, std::size_t bytes, Lane lane);
  // An idle device slot of the other lane, the highest, moved to `lane` (its free space with it): false
  // when there is none.
  bool relane_idle(Lane lane);
  // Unmaps the mapping whose first slot is `first` (a group's members with it): its pieces, to give
  // back, or none when the driver kept it mapped (whole: its free space may be given back to its
  // lane) or partly (the slots are retired: their free space is gone with them).
  std::vector<Chunk> unmap_slot(std::size_t first);
  // After unmap_slot gave nothing: the free space taken from mapping `first`'s slots (take_idle) back
  // to their lanes, unless they were retired.
  void keep_mapped(std::size_t first, std::size_t n);
  // Takes a mapping of idle device slots whole, its first slot `first` (the free space of each), unless
  // one of them is claimed or not wholly free after all: whether taken.
  bool take_idle(std::size_t first);
  void swap_slot(std::size_t i, std::vector<Chunk> pieces);
  void count_use(CUdeviceptr start, std::size_t bytes, bool add);
  CUdeviceptr slot_va(std::size_t i) const { return base_ + i * extent_; }

  const Vmm& vmm_;
  Source& source_;
  const CUdeviceptr base_;
  const std::size_t extent_, chunk_, unit_, small_max_, group_max_;
  std::vector<Slot> slots_;
  std::array<RangeAllocator, 2> free_;        // mapped free space, by lane (index: Lane)
  RangeAllocator& free_in(Lane lane) { return free_[static_cast<std::size_t>(lane)]; }
  const RangeAllocator& free_in(Lane lane) const { return free_[static_cast<std::size_t>(lane)]; }
  RangeAllocator& free_of_slot(std::size_t i) { return free_in(slots_[i].lane); }
  std::map<CUdeviceptr, std::size_t> live_;  // allocation start -> bytes (rounded)
  Figures figures_;
  // Slots: mapped, of those in host memory, idle on the device, idle in host memory.
  std::size_t mapped_ = 0, host_ = 0, idle_ = 0, idle_host_ = 0;
  // One past the highest slot ever mapped: the slots beyond were never mapped, so the scans for idle
  // slots and unmapped runs stop there (the range is twice the budget: on an H200 about 8900 slots,
  // most never used; every growth scanned them all).
  std::size_t reach_ = 0;
};

}  // namespace uvmpool::pool
