// One device's pool: its chunks, its budget, its large (stitched) and small (slab) allocations and
// the stream-ordered reuse of freed memory. Where each new piece comes from is placement's rule
// (placement.h), which this pool carries out (stock.h). Its parts, each with the lock that guards it
// (docs/architecture.md, "The device pool's parts and their locks"): the free pieces (free_pieces.h,
// under mu_), the cache of freed mappings (mapping_cache.h, its bins' locks), memory freed on streams
// (pending_frees.h, its own lock), the figures (device_figures.h, relaxed atomics), the host reserve
// (host_tier.h) and the carved range (carved_range.h, under mu_).
//
// Locks, never nested except in the order written: mu_ (the slow path: chunks, address ranges,
// building and taking apart mappings) -> one bin or class lock (the fast path: a freed allocation
// of the same size, a free slot). The fast path takes only its bin's or class's lock, so threads
// allocating different sizes never meet; descriptors are never deleted (recycled), so a lock-free
// lookup can always read the one it found and then check its state.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/checks.h"
#include "config/size_math.h"
#include "config/thread_safety.h"
#include "pool/address_map.h"
#include "pool/captures.h"
#include "pool/carved_range.h"
#include "pool/device_figures.h"
#include "pool/device_waits.h"
#include "pool/free_pieces.h"
#include "pool/host_tier.h"
#include "pool/mapping_cache.h"
#include "pool/pending_frees.h"
#include "pool/repeat_places.h"
#include "pool/pool.h"
#include "pool/size_classes.h"
#include "pool/slab_classes.h"
#include "pool/vmm.h"

namespace uvmpool::pool {

// Buffer ids of pool allocations: unique in the process, never reused, and far above the driver's
// own (small counters), so they never collide with those of memory the driver allocated.
std::uint64_t next_buffer_id();

// Bytes of an allocation of `bytes` in block b that lie in host chunks.
struct Block;
std::uint64_t host_bytes_of(const Block* b, std::size_t bytes, std::size_t chunk);

// A peak figure raised to `value` if that is higher (relaxed: statistics).
inline void raise_peak(std::atomic<std::uint64_t>& peak, std::uint64_t value) {
  std::uint64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// True once the process has begun to exit: from then on the pool makes no driver call.
bool process_exiting();

enum BlockState : int { kDead, kLive, kCached, kPending, kQuarantined };
// Or-ed into a mapping's state while pieces of it move between tiers (move.cpp): a free makes it
// Cached | kMoving (cuMemFree) or Pending | kMoving (cuMemFreeAsync; one in a capture waits for it to
// clear), and a stream-freed mapping whose work completes meanwhile becomes Cached | kMoving.
constexpr int kMoving = 0x10;
// Or-ed into the state a stream-ordered free gives a live mapping (Pending or Quarantined) until its
// live figures are taken back (unpublish, outside mu_): a move may not claim it meanwhile, as its
// commit would change the host bytes the free is about to take back from the live figures.
// base_state keeps it: no reader may take such a mapping for Pending.
constexpr int kFreeing = 0x20;
inline int base_state(int state) { return state & ~kMoving; }
constexpr std::uint64_t kNeverFreed = ~std::uint64_t{0};

namespace testing {
// Tests only: when set, called by a stream-ordered free of a live mapping in the window kFreeing
// closes (between its state leaving Live and its live figures taken back), with its address.
inline std::atomic<void (*)(CUdeviceptr)> in_free_window{nullptr};
}  // namespace testing

// cudaMalloc's alignment, which every pool pointer keeps; under UVMPOOL_GUARD also the most slack
// between an allocation's end and the unmapped guard after it.
constexpr std::size_t kGuardAlignment = 256;

// A stitched mapping: chunks mapped at base, base + chunk, ... Live (an allocation), Cached (freed,
// mapping kept for the next allocation of the same chunk count), Pending (freed on a stream whose
// work may still use it) or Quarantined (freed inside a graph capture: never reused).
class DevicePool;

struct Block {
  DevicePool* owner = nullptr;
  CUdeviceptr base = 0;
  std::size_t granules = 0;
  std::vector<Chunk> chunks;  // its pieces in address order, of either tier (moves change them one by one)
  std::size_t host_chunks = 0;  // granules in host pieces
  // All host chunks, no host extent: the shape of a premapped run, which take_host_run may cut at any
  // granule. A cached mapping of this shape is binned as a run, any other with host pieces as spilled.
  bool host_run() const { return host_chunks == granules && chunks.size() == granules; }
  bool exported = false;  // handed to CUDA IPC (chunks_of): another process maps its chunks, so they never move (mu_)
  // Ranges of moves in flight (start, bytes): several moves of one mapping run at once, over disjoint
  // pieces; the state has kMoving while this is not empty (mu_).
  std::vector<std::pair<CUdeviceptr, std::size_t>> moving;
  // A move took only part of its pieces in one tier (the thrash guard promotes the part the room
  // fits): demoted, its ranges smaller than an extent go back as chunks, so the next part may end at
  // any granule (move.cpp, take_target). Only a hint for the pieces' shape (mu_).
  bool moved_in_part = false;
  std::atomic<int> state{kDead};
  std::atomic<std::size_t> size{0};
  std::atomic<CUcontext> context{nullptr};
  std::atomic<std::uint64_t> buffer_id{0};
  // Pool::free_mark's count when its last free began (stored before the state leaves Live, read after
  // it is seen freed): a move behind a hold placed later need not copy it (DevicePool::copy_move).
  // kNeverFreed for a mapping built or joined since, whose bytes may be anyone's.
  std::atomic<std::uint64_t> freed_at{kNeverFreed};
  std::size_t guard = 0;  // UVMPOOL_GUARD: bytes of address space after the mapping, never mapped
  Block* prev = nullptr;  // in its bin while Cached
  Block* next = nullptr;
  bool binned = false;    // in a device bin of the mapping cache (under that bin's lock), where carve_cached may take it

  // Where an allocation of `bytes` in this mapping begins: its base; under guard, as far in as puts
  // its end, rounded up to kGuardAlignment, at the mapping's end, which the guard follows (guard.cpp).
  CUdeviceptr start(std::size_t bytes, std::size_t chunk) const {
    if (guard == 0) return base;
    return base + granules * chunk - div_ceil(bytes, kGuardAlignment) * kGuardAlignment;
  }
};

// Under guard, freed memory is unmapped and its granules name no descriptor, so a second free of it
// would look like a pointer of the driver's; one inside pool address space never is: it is refused
// here (INVALID_VALUE and one log line). False: not such a pointer, let the caller go on.
bool guard_refuses_free(bool guard, const AddressMap& map, CUdeviceptr p, CUresult* result);

struct SlotInfo {
  std::uint64_t buffer_id = 0;
  CUcontext context = nullptr;
  std::uint32_t size = 0;
  bool pending = false;  // freed on a stream, not yet reusable by others
};

// One chunk mapped on its own and cut into equal slots of one size class.
struct Slab {
  DevicePool* owner = nullptr;
  CUdeviceptr base = 0;
  Chunk chunk;
  int cls = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t slots = 0;
  std::uint32_t used = 0;  // live + pending slots
  std::uint32_t hint = 0;  // a word of `live` that may have a free slot
  std::vector<std::uint64_t> live;
  std::vector<SlotInfo> info;
  bool listed = false;     // in its class's list of slabs with free slots
  std::atomic<int> state{kDead};
  std::atomic<bool> moving{false};  // its chunk is changing tier: off its class's list, never given back (class lock)
  bool exported = false;            // as Block::exported (mu_)
  Slab* prev = nullptr;
  Slab* next = nullptr;
};

// The descriptor an address map entry names.
inline Block* as_block(Entry e) { return (e & kTagMask) != 0 ? nullptr : reinterpret_cast<Block*>(e); }
inline Slab* as_slab(Entry e) { return (e & kTagMask) == kSlabTag ? reinterpret_cast<Slab*>(e & ~kTagMask) : nullptr; }
inline DevicePool* as_carved(Entry e) { return (e & kTagMask) == kCarvedTag ? reinterpret_cast<DevicePool*>(e & ~kTagMask) : nullptr; }

class DevicePool {
 public:
  // `host` is the process's host tier, nullptr when spilling is off; `waits`, who is told of the pool's
  // own waits for the device (device_waits.h; the pointer may be null and may change); `captures`, the
  // process's graph captures under way (captures.h), during which a context is not waited for.
  DevicePool(const driver::Table& driver, int device, const PoolConfig& config, AddressMap& map, HostTier* host,
             const std::atomic<DeviceWaits*>& waits, Captures& captures);
  ~DevicePool();  // gives every chunk back (tests); the process's pool is never destroyed
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Reads granularity, memory size and budget and reserves address space. NOT_SUPPORTED when the
  // device has no VMM (the caller then lets the driver serve it).
  CUresult init();
  int device() const { return device_; }

  // `hint`: where to place it, and what free space to leave to others (carved only; RepeatPlaces).
  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUcontext context, const CarvedRange::Hint& hint = {});
  CUresult allocate_async(CUdeviceptr* out, std::size_t bytes, CUcontext context, const StreamKey& stream);
  // `entry` is the address map's entry for p (a Block or Slab of this device).
  // `wait_for`: the context guard mode waits for before it unmaps (nullptr: the allocation's).
  CUresult deallocate(Entry entry, CUdeviceptr p, CUcontext wait_for = nullptr);
  CUresult deallocate_async(Entry entry, CUdeviceptr p, const StreamKey& stream, bool capturing);
  // Before cuStreamDestroy: covers what the stream's frees left pending with an event recorded on
  // it (or, failing that, waits for its context); once destroyed, its handle may name another stream.
  void seal_stream(CUstream stream);
  // Before `context` is destroyed: its frees waited for and made ready, its events destroyed
  // (PendingFrees::forget_context), and the next unmap's fence no longer asked to wait for it.
  void forget_context(CUcontext context);
  std::optional<AllocationInfo> describe(Entry entry, CUdeviceptr p);
  // The live carved allocations overlapping [from, to), in address order (carve_index_mu_ only).
  std::vector<AllocationInfo> describe_carved_within(CUdeviceptr from, CUdeviceptr to);
  std::optional<ChunkView> chunks_of(Entry entry, CUdeviceptr p);

  CUresult memory_info(std::size_t* free_bytes, std::size_t* total_bytes);
  // Pool::prepare_move and the steps after it (move.cpp).
  CUresult prepare_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* out, MoveWaits waits);
  // Whether taking a mapping apart now would wait for the device first (a synchronous free since the
  // last fence). A free on another thread may make it so just after: then that one unmap waits.
  bool fence_due() const { return unfenced_.load(std::memory_order_acquire); }
  void fence_freed();  // Pool::fence_freed: fence_unmap under mu_
  CUresult copy_move(Move& move, CUstream stream, std::uint64_t frees_before);
  // Stamps a mapping's free with the next free_mark (Block::freed_at), before its state leaves Live.
  static void note_free_begun(Block* b);
  // A free of a live mapping being moved, without waiting for the move: `freed` (Pending for a
  // stream-ordered free, Cached for a synchronous one) | kMoving under mu_, unpublished; end_move bins
  // a Cached one. False when it is not moving (its move ended, or another free came first).
  bool free_while_moving(Block* b, int freed);
  CUresult commit_move(Move* move);
  void abort_move(Move* move);
  void commit_quiesced(std::span<Move* const> moves, const Quiesce& quiesce, std::span<CUresult> results,
                       const CopyReady& ready);
  std::uint64_t promotion_room();  // Pool::promotion_room
  std::optional<CUdeviceptr> promotable_end(CUdeviceptr from, std::uint64_t room);  // Pool::promotable_end
  std::optional<std::pair<CUdeviceptr, CUdeviceptr>> whole_pieces(CUdeviceptr from, CUdeviceptr end);  // Pool::whole_pieces
  // Where the carved slot p lies in ends (lock-free: Pool::runs_in_tier cuts runs there, one slot a
  // move); 0 before the carved range is made.
  CUdeviceptr carved_slot_end(CUdeviceptr p) const;
  std::size_t carved_slot_bytes() const { return extent_granules_ * chunk_; }
  std::atomic<std::uint64_t> last_room_{0};  // its last answer, for when mu_ is busy
  // The program's own cuMemCreate of `bytes` on this device: Device when the budget takes it (idle
  // pool memory is released to make room), Host when it must spill (counted against the host limit
  // until external_released), OUT_OF_MEMORY when neither can.
  CUresult admit_external(std::size_t bytes, Tier* tier);
  void external_released(std::size_t bytes, Tier tier);
  const CUmemLocation& host_location() const { return vmm_.host_location(); }
  CUresult fill_host_reserve(std::size_t bytes);
  void release_idle(bool keep_chunks);
  DeviceStats stats() const;
  void abandon();
  // Every counter recomputed from the structures; the differences, one per line ("" when none).
  // Tests only, with no other thread in the pool (invariants.cpp).
  std::string check_invariants();

 private:
  // large_blocks.cpp
  CUresult allocate_large(CUdeviceptr* out, std::size_t bytes, CUcontext context);
  CUresult free_large(Block* b, CUdeviceptr p);
  // Into its bin. `count_free`: a cuMemFree, counted under the bin lock when the bin counts it.
  void cache_block(Block* b, bool count_free = false);
  void unpublish(Block* b, bool counted);  // the figures of a live allocation that is freed
  Block* take_cached(std::size_t granules);
  // cached_ranges.cpp: a mapping of `granules` chunks (up to an eighth more where the cut would fall
  // inside an extent) made from cached device mappings that lie next to each other in address space,
  // joined, with any excess split off and cached again: no driver call. Still marked Cached (the caller counts a cache hit); nullptr when none cover it (mu_).
  Block* carve_cached(std::size_t granules) UVMPOOL_REQUIRES(mu_);
  // A mapping of `have` chunks may serve a request of `want` when it is at most an eighth larger:
  // a cut inside an extent moves to the extent's end within that, and stream-ordered reuse accepts
  // such a mapping back for the size that made it. More would keep from reuse memory that the
  // program does not use.
  static bool within_rounding(std::size_t have, std::size_t want) { return have >= want && (have - want) * 8 <= want; }
  Block* take_cached_spilled(std::size_t granules);
  // Publishes the cached mapping of `bytes`' granules that begins at `want` (RepeatPlaces) for the
  // allocation, counted as a cache hit; false when there is none. One with host pieces only where the
  // device's free, idle and growable memory cannot hold the request; one being moved whatever its tier.
  bool take_cached_at(CUdeviceptr want, std::size_t bytes, CUcontext context, CUdeviceptr* out);
  // A mapping for a large allocation, where placement says (placement.h): a cached one whole, or new pieces mapped.
  CUresult build_block(std::size_t granules, Block** out);
  // A new mapping of `granules` chunks from take_chunks, in a range with `guard` bytes more of address
  // space after it left unmapped.
  CUresult map_new_block(std::size_t granules, std::size_t guard, Block** out) UVMPOOL_REQUIRES(mu_);
  // The same for pieces already taken (given back on failure); `started`: the trace slice's start.
  CUresult map_pieces(std::vector<Chunk>&& pieces, std::size_t guard, std::uint64_t started, Block** out) UVMPOOL_REQUIRES(mu_);
  Block* make_block(CUdeviceptr va, std::vector<Chunk>&& chunks) UVMPOOL_REQUIRES(mu_);  // a descriptor for a new mapping
  // The address map's host marks of the pieces mapped from `base` on, after they were mapped or moved.
  void mark_tiers(CUdeviceptr base, std::span<const Chunk> pieces);
  void check_marks(std::string& out, CUdeviceptr at, const Chunk& c) const;  // invariants.cpp
  void destroy_block(Block* b) UVMPOOL_REQUIRES(mu_);                      // unmaps; chunks back to the free list
  // Unmaps whole pieces from its end, at least n granules (all: destroyed), and caches the rest;
  // returns the granules given back.
  std::size_t shrink_block(Block* b, std::size_t n) UVMPOOL_REQUIRES(mu_);
  bool evict_cached(std::size_t chunks_wanted) UVMPOOL_REQUIRES(mu_);
  // Takes apart cached mappings with host chunks (only those that also hold device chunks, or all);
  // returns how many chunks they held.
  std::size_t evict_spilled(bool only_with_device_chunks) UVMPOOL_REQUIRES(mu_);
  // `counted`: the caller already counted the allocation (and cache hit) under a bin or class lock.
  void publish(Block* b, std::size_t bytes, CUcontext context, CUdeviceptr* out, bool counted);
  // The figures of every allocation made / freed (host_bytes: the part in host chunks). Live bytes
  // are always kept (the budget reads them); the rest only with PoolConfig::counters. The fast paths
  // count allocations and frees under the bin or class lock they hold anyway (`counted`), so the
  // statistics add no atomic read-modify-write there; other paths count here.
  void note_allocated(CUdeviceptr p, std::size_t bytes, std::uint64_t host_bytes, bool counted);
  void note_freed(CUdeviceptr p, std::size_t bytes, std::uint64_t host_bytes, bool counted);
  void count_cache_hit() {
    if (counters_) fig_.cache_hits.fetch_add(1, std::memory_order_relaxed);
  }
  // A statistics counter bumped under the lock that guards it: a plain load and store.
  void bump(std::atomic<std::uint64_t>& n) {
    if (counters_) n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // move.cpp
  // Claims a mapping or slab for a move (mu_): off its bin or class list, its frees made to wait.
  CUresult claim_block(Block* b) UVMPOOL_REQUIRES(mu_);
  CUresult claim_slab(Slab* s) UVMPOOL_REQUIRES(mu_);
  // The claim released once no move of the owner remains; a cached mapping binned again.
  void end_move(Entry owner) UVMPOOL_REQUIRES(mu_);
  // A cached mapping taken out of its bin, its cached figures with it (false: an allocation took it).
  bool withdraw_cached(Block* b) UVMPOOL_REQUIRES(mu_);
  // How a demotion's host pieces are cut (take_target says why): a carved slot moves whole (Whole), a
  // mapping may later be promoted in part (Partable), and one moved in part before in chunks (Fine).
  enum class HostShape : std::uint8_t { Whole, Partable, Fine };
  // n granules of new pieces in `tier`: OUT_OF_MEMORY, nothing taken, when the tier has no room. With
  // NoWait, idle mappings are taken apart only while no fence is due (fence_due).
  CUresult take_target(std::size_t n, Tier tier, std::vector<Chunk>* out, MoveWaits waits, HostShape shape) UVMPOOL_REQUIRES(mu_);
  // Waits for work that may still use freed memory the move is about to unmap. NOT_READY, nothing
  // waited for: that memory was freed on a stream of a context that captures a graph, where the wait
  // would spoil the capture (captures.h); the move stays prepared.
  CUresult fence_move(const Move& m) UVMPOOL_REQUIRES(mu_);
  // The move's target pieces taken in m->to and staged (each mapped at a staging address too); on
  // failure nothing is held and the failure counted.
  CUresult take_staged_target(Move* m, MoveWaits waits, HostShape shape) UVMPOOL_REQUIRES(mu_);
  // The pieces of the mapping, slab or carved slot a prepared move belongs to, and where they begin.
  std::vector<Chunk> owner_pieces(const Move& m, CUdeviceptr* base) UVMPOOL_REQUIRES(mu_);
  // commit_move and abort_move under mu_; `quiesced`: the caller has stopped all work that could
  // touch the memory (commit_quiesced), so the pool waits for none.
  CUresult commit_locked(Move* m, bool quiesced) UVMPOOL_REQUIRES(mu_);
  void abort_locked(Move* m, bool quiesced = false) UVMPOOL_REQUIRES(mu_);
  // After a move of a carved slot ended: the slot given back if it lies in host memory holding nothing
  // (not under a hold: `quiesced`).
  void release_emptied_slot(const Move& m, bool quiesced) UVMPOOL_REQUIRES(mu_);
  // The owner's pieces [first, first + old.size()) replaced by `fresh`, and every figure a move changes,
  // here and nowhere else.
  void swap_pieces(const Move& m, std::size_t first, std::span<const Chunk> old) UVMPOOL_REQUIRES(mu_);
  void forget_range(const Move& m) UVMPOOL_REQUIRES(mu_);  // the move's range off its mapping's list
  void wait_while_moving(const Block* b);
  void wait_while_moving(const Slab* s);

  // carving.cpp: requests above small_max_ up to PoolConfig::carve_max carved out of one range of
  // extents mapped once (carved_range.h); what the device has no extent for takes the stitched path
  // (allocate_large), which spills. Every change runs under mu_; lookups take carve_index_mu_ alone.
  class CarveSource;
  struct CarvedAllocation {
    std::size_t size = 0;  // bytes asked for
    CUcontext context = nullptr;
    std::uint64_t buffer_id = 0;
    int state = kLive;  // Live, Pending (freed on a stream, its work not known done) or Quarantined
  };
  bool carves(std::size_t bytes) const {
    const std::size_t most = carve_max_.load(std::memory_order_relaxed);
    return most != 0 && bytes <= most;
  }
  Entry carved_entry() const { return reinterpret_cast<Entry>(this) | kCarvedTag; }
  CUresult allocate_carved(CUdeviceptr* out, std::size_t bytes, CUcontext context, const CarvedRange::Hint& hint = {});
  // `grow`: the range may map slots (else only its mapped free space serves).
  CUresult try_carve(CUdeviceptr* out, std::size_t bytes, CUcontext context, bool grow, const CarvedRange::Hint& hint);
  // A free of carved memory: by cuMemFree (stream null), on a stream (pending until its work is done)
  // or inside a capture (kept out of reuse for good).
  CUresult free_carved(CUdeviceptr p, const StreamKey* stream, bool capturing);
  void release_carved(CUdeviceptr p);  // a pending carved free whose work is done
  std::optional<AllocationInfo> describe_carved(CUdeviceptr p);  // carve_index_mu_ only: never waits for mu_
  std::optional<ChunkView> carved_chunks(CUdeviceptr p) UVMPOOL_REQUIRES(mu_);
  bool carved_moving(CUdeviceptr p) UVMPOOL_REQUIRES(mu_);  // a slot of the carved allocation at p is moving
  void note_carved_idle() UVMPOOL_REQUIRES(mu_);  // fig_.carved_idle and the carved figures from the range
  // Idle carved slots given back to the free lists (reclaim, release_idle); how many granules.
  std::size_t release_carved_idle(std::size_t granules) UVMPOOL_REQUIRES(mu_);
  void check_carved(std::string& out, std::uint64_t* device_granules, std::uint64_t* host_granules, std::uint64_t* extents,
                    std::uint64_t* live, std::uint64_t* live_host) UVMPOOL_REQUIRES(mu_);

  // carved_moves.cpp: a carved slot moves whole, with every allocation in it (carved_range.h).
  CUresult prepare_carved_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* m, MoveWaits waits) UVMPOOL_REQUIRES(mu_);
  // Bytes of live carved allocations (each its size asked for) inside [from, to).
  std::uint64_t carved_live_within(CUdeviceptr from, CUdeviceptr to) UVMPOOL_REQUIRES(carve_index_mu_);
  // Bytes of [p, p + bytes) that lie in host memory, by the address map's marks (no lock needed; a
  // slot's commit changes them under carve_index_mu_, which orders it against a taker of the index).
  std::uint64_t carved_host_bytes(CUdeviceptr p, std::size_t bytes) const;
  // A context with carved memory freed on it, its work not known done, in [from, to) (nullptr: none).
  CUcontext carved_pending_within(CUdeviceptr from, CUdeviceptr to) UVMPOOL_REQUIRES(mu_);
  // Slots in host memory that hold no allocation any more given back (after a free).
  std::size_t release_idle_host_slots() UVMPOOL_REQUIRES(mu_);  // slots given back

  // slabs.cpp
  CUresult allocate_small(CUdeviceptr* out, std::size_t bytes, CUcontext context);
  // Not analysed: the class lock it needs is found by a loop (the slab may change class meanwhile).
  CUresult free_small(Slab* s, CUdeviceptr p, bool pending) UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  CUresult new_slab(int cls, Slab** out);
  void destroy_slab(Slab* s) UVMPOOL_REQUIRES(mu_);
  std::size_t evict_empty_slabs() UVMPOOL_REQUIRES(mu_);
  void release_slot(Slab* s, std::uint32_t slot);

  // placement.h's rule carried out on this pool: where each piece comes from (stock.h, stock.cpp).
  class PoolStock;

  // chunks.cpp: the physical chunks and extents and the budget.
  // New pieces of n granules in all, where placement puts them (Purpose::Pieces: device first, then
  // host). OUT_OF_MEMORY, nothing taken, when the tiers cannot cover n.
  CUresult take_chunks(std::size_t n, std::vector<Chunk>* out) UVMPOOL_REQUIRES(mu_);
  void return_chunks(std::span<const Chunk> chunks) UVMPOOL_REQUIRES(mu_);  // unmapped pieces back: device free lists, host reserve
  // n free granules into `out` as pieces (placement's Stock::take_device): whole extents while they fit, chunks for the rest (making
  // chunks of free extents if need be). Fewer only where the driver refused a step.
  // With `runs` (a move's target), what free extents do not cover goes in runs instead: pieces of an
  // extent's size, then halves, quarters and so on down to two chunks (the rest's binary digits), each
  // one mapping at the commit instead of one a chunk; a free run of the size, or free chunks fused into
  // one (take_run). Modeled, promotions into the chunks demotions freed made half a held training step's
  // time remaps (docs/tiering.md, "What a held step is made of").
  std::size_t pull_device_pieces(std::size_t n, std::vector<Chunk>* out, bool runs = false) UVMPOOL_REQUIRES(mu_);
  // UVMPOOL_CHECKS: the free pieces and the figures written with them agree (all under mu_); at the
  // end of each placement and wherever pieces come back.
  void check_free_pieces() const UVMPOOL_REQUIRES(mu_) {
    UVMPOOL_CHECK(fig_.chunks_free.load(std::memory_order_relaxed) == free_granules(), "chunks_free counts the free pieces");
    UVMPOOL_CHECK(fig_.chunks_held.load(std::memory_order_relaxed) >= free_granules(), "the free pieces are held");
    UVMPOOL_CHECK(fig_.extents_held.load(std::memory_order_relaxed) >= free_.multi_chunk_pieces(),
                  "free extents and runs are counted among extents_held");
  }
  std::size_t free_granules() const UVMPOOL_REQUIRES(mu_) {
    return free_.granules();
  }
  // A free run of `granules`, or `granules` free chunks given back and made again as one handle (the
  // pool never holds more than it did). False when neither can be (the chunks are then made again).
  bool take_run(std::size_t granules, Chunk* out) UVMPOOL_REQUIRES(mu_);
  bool split_free_run() UVMPOOL_REQUIRES(mu_);  // one free run given back and made again as chunks
  // Gives back a free piece of several granules and makes it again as chunks (false: fewer made).
  bool split_free_piece(Handle handle, std::size_t granules) UVMPOOL_REQUIRES(mu_);
  CUresult grow(std::size_t n) UVMPOOL_REQUIRES(mu_);  // n granules: whole extents, chunks for the rest
  bool split_free_extent() UVMPOOL_REQUIRES(mu_);  // one free extent given back and made again as chunks (false: fewer made)
  void note_grown(std::size_t n);
  std::size_t growable_chunks() UVMPOOL_REQUIRES(mu_);  // how many chunks the budget lets the pool add now
  std::size_t read_growable_chunks(std::uint64_t held);  // the same, from the driver's figures
  std::chrono::steady_clock::time_point full_until_ UVMPOOL_GUARDED_BY(mu_){};  // the device was full
  std::uint64_t full_at_held_ UVMPOOL_GUARDED_BY(mu_) = 0;
  void release_free_chunks() UVMPOOL_REQUIRES(mu_);  // every free chunk and extent back to the driver
  // Device memory used by anyone but the pool (chunks.cpp); where the driver's figure was read,
  // its free memory goes to *driver_free (UINT64_MAX: not known on this thread).
  std::uint64_t others_bytes(std::uint64_t* driver_free = nullptr);

  // stream_reuse.cpp: memory freed on streams (pending_, a part of its own: pending_frees.h).
  // A stream-ordered allocation's carving hint (repeat_places.h): `wants` first, and other sizes'
  // places left alone where other free space fits.
  CarvedRange::Hint placing(std::span<const CUdeviceptr> wants, std::size_t bytes);
  // `wants`: addresses to take first, in order, if the stream freed them (RepeatPlaces::last_places; 0s
  // are no wish).
  bool reuse_on_stream(const StreamKey& stream, std::size_t bytes, CUcontext context, std::span<const CUdeviceptr> wants,
                       CUdeviceptr* out);
  void add_pending(const StreamKey& stream, PendingItem item);
  // Frees whatever freed-on-stream memory has completed; with `wait`, waits for all of it.
  bool collect_pending(bool wait);
  void release_pending(const PendingItem& item);  // cached (or its slot freed) for anyone to reuse
  // cuMemFree promises the program that the device is done with the memory (NVIDIA's waits for it);
  // the pool's free does not wait, which is safe while the memory stays mapped: later work on the
  // same stream runs after the work that used it. Unmapping it is not: work queued before the free
  // may still read it, and cuMemUnmap does not wait. So a free notes that it happened (note_sync_free)
  // and destroy_block / shrink_block / destroy_slab first wait for the device (fence_unmap): the wait
  // cuMemFree skipped, paid only when freed memory is unmapped, once per batch of frees. Not in a
  // context where a graph capture is under way, which the wait would spoil (captures.h): that context
  // stays listed, and is waited for by the first fence after the capture.
  void note_sync_free(CUcontext context);
  void fence_unmap();
  void wait_for_context(CUcontext context);  // cuCtxSynchronize in `context`

  // Recovery on the slow path: frees memory other streams are done with, then waits for them.
  CUresult with_pressure_relief(const std::function<CUresult()>& attempt);

  CUresult take_range(std::size_t bytes, CUdeviceptr* va) UVMPOOL_REQUIRES(mu_);  // address space for a mapping

  // guard.cpp: UVMPOOL_GUARD (PoolConfig::guard), the debugging mode: every allocation is a mapping
  // of its own whose end meets unmapped address space, and a free unmaps it at once.
  CUresult allocate_guarded(CUdeviceptr* out, std::size_t bytes, CUcontext context);
  // `wait_for`: the context whose work may still use the memory (waited for before the unmap).
  CUresult free_guarded(Block* b, CUdeviceptr p, CUcontext wait_for);
  // A freed guarded range stays out of use (so a stale pointer into it faults) until the device's
  // memory size of other ranges was freed after it.
  void retire_guarded(CUdeviceptr va, std::size_t bytes) UVMPOOL_REQUIRES(mu_);
  std::deque<std::pair<CUdeviceptr, std::size_t>> guard_retired_ UVMPOOL_GUARDED_BY(mu_);  // oldest first
  std::uint64_t guard_retired_bytes_ UVMPOOL_GUARDED_BY(mu_) = 0;

  const driver::Table& d_;
  const int device_;
  PoolConfig config_;
  AddressMap& map_;
  const std::atomic<DeviceWaits*>& device_waits_;  // Pool's: told before each wait for the device
  Captures& captures_;                             // Pool's: fence_unmap leaves a capturing context alone
  Vmm vmm_;
  bool abandoned_ = false;
  const bool counters_;

  std::size_t chunk_ = 0;
  unsigned chunk_shift_ = 0;
  std::size_t extent_granules_ = 0;  // chunks per extent (UVMPOOL_EXTENT_SIZE); 0: no extents
  std::size_t small_max_ = 0;
  std::atomic<std::size_t> carve_max_{0};  // 0: no carving (config_.carve_max, or no extents, or no address space)
  std::uint64_t total_ = 0;
  std::uint64_t budget_ = 0;

  std::atomic<bool> unfenced_{false};             // a cuMemFree since the last fence_unmap
  std::atomic<CUcontext> unfenced_context_{nullptr};  // the context last noted (note_sync_free's fast path)
  // The contexts whose allocations were freed since the last fence_unmap: each one's work is waited
  // for (two contexts of one device are two queues of work; one's synchronize is not the other's).
  Mutex unfenced_mu_;  // a leaf
  std::vector<CUcontext> unfenced_contexts_ UVMPOOL_GUARDED_BY(unfenced_mu_);

  // The slow path.
  mutable Mutex mu_;
  FreePieces free_ UVMPOOL_GUARDED_BY(mu_);  // the device's free chunks, extents and runs (free_pieces.h)
  RangeAllocator ranges_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<std::pair<CUdeviceptr, std::size_t>> reservations_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<Block*> spare_blocks_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<Slab*> spare_slabs_ UVMPOOL_GUARDED_BY(mu_);

  MappingCache cache_;  // freed mappings kept for reuse: its own locks (mapping_cache.h)

  // host_runs.cpp: mappings of host chunks made ahead of need (by the reserve thread), so that an
  // allocation the device has no room for at all is served with no driver call.
  Block* take_host_run(std::size_t granules) UVMPOOL_REQUIRES(mu_);  // the smallest covering run, split
  bool upkeep_host();                          // the reserve thread's work for this device
  bool premap(std::size_t chunks);
  void premap_reserve();  // premaps all but the reserve's unmapped share, now (fill_host_reserve)
  bool trim_premapped(std::size_t chunks);
  // Takes premapped runs apart (smallest first) until the reserve holds `chunks` loose ones:
  // unmapping costs less than pinning more.
  void unmap_host_runs(std::size_t chunks) UVMPOOL_REQUIRES(mu_);

  std::unique_ptr<SlabClasses> slabs_;  // the size classes' lists of slabs: a lock per class (slab_classes.h)

  PendingFrees pending_;  // memory freed on streams: its own lock (pending_frees.h)
  RepeatPlaces repeat_;   // where stream-ordered allocations went last: its own lock (repeat_places.h)

  DeviceFigures fig_;  // every figure, relaxed atomics (device_figures.h: who writes each, under which lock)
  // The host tier.
  HostTier* host_tier_ = nullptr;
  std::unique_ptr<HostReserve> host_;  // nullptr: no spilling on this device
  // Moves (move.cpp). move_mu_ is a leaf, held only to wait for and announce the end of a move.
  Mutex move_mu_;
  std::condition_variable move_cv_;
  // Carving (carving.cpp): the range, made on the first carved request, and the pool's index of
  // carved allocations. The index has a leaf lock of its own, taken inside mu_ where it changes and
  // alone where it is read (find, cuPointerGetAttribute, the launch hooks): a lookup never waits for
  // what mu_ is held across (a fence, a move's commit).
  std::unique_ptr<CarvedRange::Source> carve_source_;  // a CarveSource
  std::optional<CarvedRange> carve_range_ UVMPOOL_GUARDED_BY(mu_);
  std::atomic<CUdeviceptr> carve_base_{0};  // the range's base once made (carved_slot_end reads it without mu_)
  Mutex carve_index_mu_;
  std::map<CUdeviceptr, CarvedAllocation> carved_info_ UVMPOOL_GUARDED_BY(carve_index_mu_);
  bool carving_ UVMPOOL_GUARDED_BY(mu_) = false;  // inside the range's own growth: reclaim leaves its slots alone
  std::vector<Block*> all_blocks_ UVMPOOL_GUARDED_BY(mu_);  // every descriptor ever made, for the destructor
  std::vector<Slab*> all_slabs_ UVMPOOL_GUARDED_BY(mu_);
};

}  // namespace uvmpool::pool
