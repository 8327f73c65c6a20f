// The pool: every device allocation uvmpool serves comes from here. One Pool per process holds a
// DevicePool per device; this header is the whole interface the hooks (and tests, benchmarks) use.
//
// Memory model (see docs/architecture.md): physical memory is held as chunks of the driver's
// allocation granularity (2 MiB on H100/H200). A large allocation is any set of free chunks mapped
// into one contiguous virtual range ("stitching"); a small one is a slot of a slab (one chunk mapped
// on its own, cut into equal slots). Freed large allocations keep their mapping in a cache, so a
// steady alloc/free pattern makes no driver call; under pressure cached mappings are taken apart and
// their chunks reused.
//
// Tiers (spill): a chunk lies in device memory or in pinned host memory (a host-located cuMemCreate
// handle), and both map into the same ranges. When the device budget is reached, an allocation takes
// host chunks for the rest: one allocation may be part device, part host, and kernels reach the host
// part over PCIe. Device chunks go to allocations first come, first served (see docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/options.h"
#include "driver/driver_api.h"
#include "pool/device_waits.h"
#include "pool/external_handles.h"
#include "pool/size_classes.h"
#include "pool/vmm.h"

namespace uvmpool::pool {

struct PoolConfig {
  config::Size device_limit{0, 100.0, true};  // cap on what the process uses per device
  std::uint64_t headroom = 256ull << 20;      // device memory always left free for others
  std::size_t small_max = 1ull << 20;          // largest request served from slabs
  std::size_t chunk_size = 0;                  // 0: the driver's minimum granularity
  std::size_t extent_size = 32ull << 20;       // large allocations' physical unit; < 2 chunks: off
  std::size_t carve_max = 4ull << 30;          // largest request carved from extents mapped once (0: off)
  std::size_t carve_group = 4;                 // slots a carved group's handle holds at most (1: no groups)
  bool repeat_places = true;                   // stream-ordered allocations where their point went last
  bool spill = true;                           // serve what the device cannot from pinned host memory
  config::Size host_limit{0, 50.0, true};      // cap on pinned host memory (share of physical memory)
  std::uint64_t host_reserve = 512ull << 20;   // pinned ahead of need, per device, once spilling is near
  bool report_host = false;                    // cuMemGetInfo counts host capacity in
  std::uint32_t host_idle_ms = 5000;           // no spill for this long: the reserve shrinks to its base
  bool counters = true;                        // the statistics-only counters (allocations by size, peaks,
                                               // cache hits); off only to measure what they cost
  bool guard = false;                          // debugging: every allocation its own mapping, ending where
                                               // unmapped address space begins; frees unmap (guard.cpp)

  // From UVMPOOL_DEVICE_LIMIT, _DEVICE_HEADROOM, _CHUNK_SIZE, _EXTENT_SIZE, _CARVE_MAX, _CARVE_GROUP, _REPEAT_PLACES,
  // _SPILL, _HOST_LIMIT, _HOST_RESERVE, _REPORT_HOST, _GUARD.
  static PoolConfig from_options(const config::Options& options);
};

// What the driver would answer about an allocation (cuMemGetAddressRange, cuPointerGetAttribute).
struct AllocationInfo {
  CUdeviceptr base = 0;
  std::size_t size = 0;        // bytes asked for
  int device = -1;
  CUcontext context = nullptr;  // current when it was allocated
  std::uint64_t buffer_id = 0;  // unique per allocation, never reused
};

// The physical chunks under a live allocation, for CUDA IPC (src/hooks/ipc_export.cpp), which
// hands them to another process to map. The caller must not release them.
struct ChunkView {
  AllocationInfo info;
  std::size_t offset = 0;      // where info.base lies in the mapping of `chunks`
  std::size_t chunk_size = 0;
  std::vector<CUmemGenericAllocationHandle> chunks;  // in mapping order (a slab: its one chunk)
  std::vector<std::uint32_t> granules;  // chunks[i] is granules[i] * chunk_size bytes (an extent: more than one)
  bool host_chunks = false;    // some of them lie in pinned host memory (spilled)
  bool exportable = false;     // all were made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
};

// A move in progress: pieces of pool memory changing tier at their addresses (Pool::prepare_move and
// the steps after it; src/pool/move.cpp says how). Filled by prepare_move; the caller reads the
// public part and passes the whole back to the next step.
struct Move {
  CUdeviceptr address = 0;  // the pieces that move: whole pieces covering the bytes asked for
  std::size_t bytes = 0;
  Tier to = Tier::Device;
  CUdeviceptr staging = 0;  // where the first new piece is mapped too (its staging mapping): the
                            // copy's target. 0: nothing to move (already in `to`), and nothing held
  std::vector<CUdeviceptr> staged;  // each new piece's staging address (Vmm::staging), in order
  bool uncopied = false;  // copy_move left its copy out (freed memory): counted at the commit
  // The pool's own.
  int device = -1;
  std::uintptr_t owner = 0;              // the address map's entry: a mapping or a slab
  std::vector<Chunk> target;             // the new pieces
  std::size_t chunk_size = 0;            // the pool's granule: target[i] covers granules * chunk_size

  // Where the byte at `p` (in [address, address + bytes)) lands before the commit.
  CUdeviceptr staging_of(CUdeviceptr p) const {
    CUdeviceptr at = address;
    for (std::size_t i = 0; i < target.size(); ++i) {
      const CUdeviceptr next = at + target[i].granules * chunk_size;
      if (p < next) return staged[i] + (p - at);
      at = next;
    }
    return 0;
  }
};

// Whether preparing a move may wait for the device (Pool::prepare_move). Taking an idle mapping apart
// after a synchronous free waits for all the program's queued work first (the pool frees without the
// driver, and fences before it unmaps: DevicePool::fence_unmap), under the pool's lock. Tiering's mover
// prepares with NoWait: such sources are left alone (a program thread's next allocation fences and
// takes them), and the move finds room elsewhere or is refused for room, rather than the mover (and
// every allocation behind the pool's lock) waiting half a training step, or its standing holds being
// released for the wait (tiering/hold_breaker.h).
enum class MoveWaits { Allowed, NoWait };

// Tiering's way of stopping the program's work around commits (Pool::commit_quiesced).
using Quiesce = std::function<bool(std::span<char> commit)>;
// Asked right before moves[index] is committed (Pool::commit_quiesced): waits until that move's copy
// is done; false: commit nothing more (the move and those after it are aborted).
using CopyReady = std::function<bool(std::size_t index)>;

// Per-device figures (bytes unless said otherwise); a consistent-enough snapshot, not atomic.
struct DeviceStats {
  std::uint64_t chunk_size = 0;
  std::uint64_t extent_size = 0;       // 0: extents off
  std::uint64_t extents_held = 0;      // of chunks_held, pieces larger than a chunk: extents (extent_size) and runs (2 chunks to half an extent, made for moves)
  std::uint64_t chunks_held = 0;       // physical chunks the pool owns (mapped or not), extents counted in chunks
  std::uint64_t chunks_free = 0;       // held, not mapped anywhere
  std::uint64_t carved_mapped_bytes = 0;  // carving (UVMPOOL_CARVE_MAX): slots mapped on the device, of chunks_held
  std::uint64_t carved_live_bytes = 0;    // ... in carved allocations (each rounded up to 256 B)
  std::uint64_t carved_idle_bytes = 0;    // ... in slots with no allocation (idle memory, given back first)
  std::uint64_t chunks_cached = 0;     // mapped in freed (cached) large allocations or empty slabs
  std::uint64_t held_bytes = 0;        // chunks_held * chunk_size
  std::uint64_t address_space_bytes = 0;  // virtual address space reserved
  std::uint64_t live_bytes = 0;        // sum of the sizes asked for by live allocations (both tiers)
  std::uint64_t live_allocations = 0;
  std::uint64_t allocations = 0;       // served since the start (the sum of allocations_by_size)
  std::uint64_t frees = 0;
  std::uint64_t allocations_by_size[kSizeBuckets] = {};  // by the bytes asked for: kSizeBucketNames
  std::uint64_t peak_held_bytes = 0;   // most chunks_held * chunk_size ever
  std::uint64_t peak_live_bytes = 0;   // most live bytes at once, both tiers
  std::uint64_t peak_live_device_bytes = 0;  // ... of them in device memory
  std::uint64_t peak_live_host_bytes = 0;    // ... in host memory
  std::uint64_t stitched_maps = 0;     // new mappings built (driver calls made)
  std::uint64_t cache_hits = 0;        // large allocations served by a cached mapping
  // Stream-ordered allocations whose point of the program had a place remembered (repeat_places.h):
  // placed there again, and placed elsewhere (that memory was not free).
  std::uint64_t repeat_places_kept = 0, repeat_places_missed = 0;
  std::uint64_t mappings_broken = 0;   // cached mappings taken apart for their chunks
  std::uint64_t mappings_carved = 0;   // allocations served by cutting or joining cached mappings (no driver call)
  std::uint64_t chunks_created = 0;
  std::uint64_t chunks_released = 0;
  std::uint64_t budget = 0;            // the device limit in bytes (0 before first use)
  std::uint64_t out_of_memory = 0;     // allocations refused
  // The host tier (spill).
  std::uint64_t host_held_bytes = 0;       // host_chunks_held * chunk_size
  std::uint64_t host_chunks_held = 0;      // pinned host chunks the pool owns: mapped or in the reserve
  std::uint64_t host_chunks_reserve = 0;   // of those, pinned but not mapped: ready for the next spill (host extents kept for moves included)
  std::uint64_t host_chunks_mapped = 0;    // of those, mapped: in live or cached allocations, or premapped
  std::uint64_t host_chunks_premapped = 0; // of the mapped, in host-only runs ready for the next spill
  std::uint64_t host_chunks_cached = 0;    // of the mapped, in freed part-host mappings kept for reuse
  std::uint64_t live_host_bytes = 0;       // bytes of live allocations that lie in host chunks
  std::uint64_t peak_host_held_bytes = 0;
  std::uint64_t spilled_allocations = 0;   // allocations given host chunks (wholly or in part), and
                                           // the program's own cuMemCreate handles made in host memory
  std::uint64_t host_chunks_pinned_inline = 0;  // pinned on the allocation path (the reserve was empty)
  std::uint64_t external_device_bytes = 0; // the program's own device cuMemCreate, in device memory
  std::uint64_t external_host_bytes = 0;   // the program's own device cuMemCreate served by host memory
  std::uint64_t host_limit = 0;            // UVMPOOL_HOST_LIMIT in bytes (process-wide)
  // Moves between the tiers (Pool::commit_move).
  std::uint64_t moved_to_device_bytes = 0;  // promoted
  std::uint64_t moved_to_host_bytes = 0;    // demoted
  // Of those, the bytes of live allocations (a carved slot or slab moves whole, free space too).
  std::uint64_t moved_live_to_device_bytes = 0, moved_live_to_host_bytes = 0;
  std::uint64_t moved_uncopied_bytes = 0;   // of both, freed memory not copied (Pool::copy_move's frees_before)
  std::uint64_t moves = 0;                  // committed
  std::uint64_t moves_failed = 0;           // prepare or commit refused by the driver or the tiers
  std::uint64_t moves_in_flight = 0;        // prepared, not yet committed or aborted
  // Mappings the committed moves unmapped and mapped at their addresses: a device mapping's remap
  // costs per mapping, a host one's per byte as well (../shared/FACTS.md, docs/tiering.md), so
  // mappings per move, beside the times by call below, say what the commits cost.
  std::uint64_t move_mappings_unmapped = 0;
  std::uint64_t move_mappings_mapped = 0;
  std::uint64_t move_commit_us = 0;  // host time the commits took, and of it in the remaps' driver calls
  std::uint64_t move_remap_us = 0;
  // Of move_remap_us, by driver call and by the tier of the pieces it acted on: a demotion unmaps
  // device pieces and maps host ones, a promotion the other way round.
  std::uint64_t move_unmap_device_us = 0, move_unmap_host_us = 0;
  std::uint64_t move_map_device_us = 0, move_map_host_us = 0;
  std::uint64_t move_set_access_device_us = 0, move_set_access_host_us = 0;
};

class DevicePool;
class HostTier;
using Handle = CUmemGenericAllocationHandle;

// Results of operations on pointers that may not be ours.
enum class Ownership { Ours, Foreign };

class Pool {
 public:
  // `driver` must outlive the pool (the process-wide real driver table does).
  Pool(const driver::Table& driver, PoolConfig config);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // The process's pool over the real driver, made on first use from the options; never destroyed
  // (frees may come during exit). nullptr when there is no driver.
  static Pool* process();
  // The process's pool if it was made, without making it (for statistics).
  static Pool* existing();

  // cuMemAlloc: `bytes` on the current context's device. INVALID_VALUE for 0 bytes,
  // INVALID_CONTEXT without a current context, OUT_OF_MEMORY when the budget cannot cover it.
  CUresult allocate(CUdeviceptr* out, std::size_t bytes);
  // cuMemFree. Foreign pointers are not touched (the caller passes them to the driver); a double
  // free or an interior pointer gives INVALID_VALUE and one log line.
  Ownership deallocate(CUdeviceptr p, CUresult* result);

  // cuMemAllocAsync / cuMemFreeAsync: memory freed on a stream is reused at once on that stream,
  // on others only once the freeing stream's work has completed. A capturing stream is not served
  // (the caller passes the call to the driver): see `capturing`. Memory comes from the stream's
  // device, whatever context is current (as the driver's pools serve it), and a free's event goes on
  // the stream in the stream's context.
  CUresult allocate_async(CUdeviceptr* out, std::size_t bytes, CUstream stream);
  Ownership deallocate_async(CUdeviceptr p, CUstream stream, CUresult* result);
  // Before cuStreamDestroy(stream): what was freed on it and waits for its work is covered by an
  // event recorded on it now, while the handle still names that stream.
  void stream_destroying(CUstream stream);
  // Before `context` is destroyed (cuCtxDestroy, cuDevicePrimaryCtxReset, a primary context's last
  // release): what was freed on its streams is waited for and reused, and the pool keeps none of its
  // events, whose handles would outlive it (and might name the next context's).
  void context_destroying(CUcontext context);
  // Around a graph capture of `stream` (the hooks of cuStreamBeginCapture*, cuStreamEndCapture*): the
  // driver refuses the pool's wait before an unmap (cuCtxSynchronize) during one, spoiling it, so
  // what was freed is waited for before it begins, and during it that wait is left for after it
  // (captures.h). capture_beginning just before the begin is forwarded, capture_begun with the
  // driver's answer (on the same thread); capture_ended after an end was forwarded, whatever the
  // driver answered.
  // A cuMemFree of memory allocated in a context with a capture under way is held until the capture
  // is over (held_frees.h): the allocation stays live and mapped, and a second free of it is a double
  // free. Guard mode's stream-ordered frees, which unmap at once, are held the same way.
  void capture_beginning(CUstream stream);
  void capture_begun(CUstream stream, CUresult began);
  void capture_ended(CUstream stream);
  // Whether `stream` is capturing a graph (then allocations on it take the driver's own path).
  bool capturing(CUstream stream);

  // The live allocation containing `p` (interior pointers included), if the pool made it. A free held
  // through a capture is no longer live here, though its memory stays mapped until the capture is over.
  std::optional<AllocationInfo> find(CUdeviceptr p) const;
  // The chunks under the live allocation containing `p`, if the pool made it (held frees as in find).
  std::optional<ChunkView> chunks_of(CUdeviceptr p) const;
  // Whether p lies in address space the pool reserved (allocated or not).
  bool in_pool_space(CUdeviceptr p) const;
  // For the launch hooks (src/tiering), lock-free: what is mapped at `p` (owner 0: nothing of the
  // pool's; else the mapping or slab, named as a move names it) and whether it lies in host memory.
  // An answer may be stale by the time it is read, as any pointer lookup racing a free would be.
  struct Probe {
    std::uintptr_t owner = 0;
    bool host = false;
    CUdeviceptr granule_end = 0;  // where p's granule ends (0 with owner 0): the next one to probe in a range
  };
  Probe probe(CUdeviceptr p) const;
  // The runs of [from, end) whose granules lie in `tier` now, in address order, as (start, bytes),
  // clipped to [from, end); the walk ends at the first granule no allocation owns (freed since).
  // The carved slots [from, end) lies in (carved_moves.cpp: a slot moves whole): their start, end and
  // the bytes of one; nullopt where `from` lies in no carved slot. Lock-free (a launch hook asks).
  struct CarvedSlots {
    CUdeviceptr start = 0, end = 0;
    std::size_t slot_bytes = 0;
  };
  std::optional<CarvedSlots> carved_slots(CUdeviceptr from, CUdeviceptr end) const;
  // The live allocations in the carved slots that [from, end) lies in, in address order (empty where
  // `from` lies in no carved slot): what a move of those slots carries, and whose advice they answer
  // to together (src/tiering/advice.h). Takes the carved index's leaf lock, never the pool's.
  std::vector<AllocationInfo> carved_slot_allocations(CUdeviceptr from, CUdeviceptr end) const;
  // What a move of the range to the other tier would carry (tiering: one move per run); a run in
  // carved memory ends where its slot does (a slot moves whole, and one a move).
  std::vector<std::pair<CUdeviceptr, std::size_t>> runs_in_tier(CUdeviceptr from, CUdeviceptr end, Tier tier) const;
  // Whether host memory is mapped anywhere in pool address space (spilled memory, live or cached):
  // while not, no launch can touch host memory through the pool, and the hooks look no further.
  bool any_host_mapped() const;

  // cuMemGetInfo for the current context's device: total = the budget, free = what is left of it;
  // with report_host, the host limit and what is left of it are added.
  CUresult memory_info(std::size_t* free_bytes, std::size_t* total_bytes);

  // The program's own cuMemCreate (PyTorch expandable segments, NCCL, vLLM). Device memory counts
  // against the budget (idle pool memory is released to make room); when the budget cannot take it
  // and spill is on, the handle is made in pinned host memory instead, so those programs overcommit
  // too. Works with no current context (NCCL). Other locations go to the driver unchanged.
  CUresult create_external(Handle* handle, std::size_t size, const CUmemAllocationProp* prop,
                           unsigned long long flags);
  // The driver keeps a handle's memory until every reference to it is released and every mapping of
  // it unmapped; what create_external counted is given back then (external_handles.h). The hooks tell
  // of each step once the driver has made it: cuMemRelease (releasing_external before the driver's
  // release, released_external with its answer after), cuMemRetainAllocationHandle of the memory
  // mapped at `at` (retained_external), the program's cuMemMap and cuMemUnmap (mapped_external,
  // unmapped_external). Handles not counted pass by.
  std::uint64_t releasing_external(Handle handle) const;
  void released_external(std::uint64_t memory);
  void retained_external(Handle handle, CUdeviceptr at);
  void mapped_external(CUdeviceptr va, std::size_t size, Handle handle);
  void unmapped_external(CUdeviceptr va, std::size_t size);
  // Counted handles whose memory the driver still keeps (tests).
  std::size_t external_handles_live() const;
  // The properties the program asked for, for a handle create_external placed in host memory.
  std::optional<CUmemAllocationProp> requested_properties(Handle handle) const;

  // Moving memory between the tiers at the same addresses (src/pool/move.cpp), in steps the caller
  // sequences; deciding when the program's work allows it is the caller's (tiering's):
  //   prepare_move: claims the pieces covering [p, p + bytes) of one live allocation, cached mapping,
  //     stream-freed mapping or slab (all in one tier), makes the target pieces in `to` and maps them at
  //     a staging address. Moves of disjoint ranges of one mapping may be in flight at once.
  //     NOT_READY: the memory is changing hands or those pieces are already moving, ask again;
  //     NOT_PERMITTED: exported by CUDA IPC (another process maps its chunks); NOT_SUPPORTED: guard
  //     mode, or `to` is Host with spill off; OUT_OF_MEMORY: `to` has no room; INVALID_VALUE: not pool
  //     memory, not one allocation, or pieces in both tiers.
  //   copy_move: the copy to the staging mapping, enqueued on `stream` (the caller waits for it).
  //     `frees_before`: a free_mark() taken before a point in every stream's order that the copy runs
  //     after (tiering's hold or fence, whose events it waits for): a mapping still freed now whose
  //     free began before the mark holds no byte any work may read (all work using it was submitted
  //     before its free, so before the point), and is not copied (moved_uncopied_bytes). 0: copy all.
  //   commit_move: the new pieces mapped at the address, in place of the old, which go back to their
  //     tier. Failing, the old mapping stands and the move stays prepared (commit again, or abort);
  //     NOT_READY while memory it unmaps was freed on a stream of a context capturing a graph (the
  //     wait for that stream would spoil the capture: captures.h).
  //   abort_move: gives the target back; the old mapping was never touched.
  // Until the commit or abort, exporting that memory waits; a free of it does not (a mapping's leaves
  // a freed mapping being moved, binned when the move ends; a slab's slot is freed as any). With
  // MoveWaits::NoWait, room that only a fence could free counts as none (OUT_OF_MEMORY).
  CUresult prepare_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* out, MoveWaits waits = MoveWaits::Allowed);
  CUresult copy_move(Move& move, CUstream stream, std::uint64_t frees_before = 0);
  // A count of the frees of stitched mappings begun so far in the process, for copy_move.
  static std::uint64_t free_mark();
  CUresult commit_move(Move* move);
  void abort_move(Move* move);
  // Commits prepared moves of one device (their copies finished) while the caller holds the program's
  // work still (tiering/mover.cpp), its hold drained before this is called (a drain under the lock
  // would wait for work that may wait for a free that waits for the lock). The device's pool lock is
  // held across `quiesce` and the commits, so no thread of the pool can be inside a wait for the
  // stopped work meanwhile, and the commits wait for no work themselves (the caller's hold has let
  // all earlier work finish).
  // `quiesce` stops the work and sets commit[i] nonzero for each move to commit; it answers false when
  // it could not stop the work (then every move is aborted). results[i]: CUDA_SUCCESS, committed (or
  // nothing was to move); otherwise aborted (NOT_READY: not asked to commit; or the remap's error),
  // the old mapping in place. Every move ends: none stays prepared. With `ready`, the copies may still
  // be running when `quiesce` returns: each move commits once ready(i) says its copy is done, in the
  // order given, so the remaps of the first moves run beside the copies of the later ones. The caller
  // must not let a move be aborted while its copy may run (ready waits for every copy before false).
  void commit_quiesced(int device, std::span<Move* const> moves, const Quiesce& quiesce, std::span<CUresult> results,
                       const CopyReady& ready = {});
  // Device bytes a move to the device tier could take now without a demotion first (idle device
  // memory and growth within the budget); the calling thread's context should be on `device`.
  std::uint64_t promotion_room(int device);
  // Where the longest run of whole pieces from the one `from` lies in ends whose host pieces take at
  // most `room` bytes of device memory to promote: a move of [from, end) moves only the pieces it
  // touches, each whole (host extents cannot be cut). `from` itself when not even that piece fits or
  // `from` is no mapping's. Pieces are not in the address map, so this asks the mapping; while the
  // pool's lock is busy (a commit) it answers nullopt at once.
  std::optional<CUdeviceptr> promotable_end(int device, CUdeviceptr from, std::uint64_t room);
  // [from, end) (inside one mapping) widened to the whole pieces it touches: what a move of it
  // carries. Unchanged where no mapping of the pool's lies; nullopt at once while the lock is busy.
  std::optional<std::pair<CUdeviceptr, CUdeviceptr>> whole_pieces(int device, CUdeviceptr from, CUdeviceptr end);

  // Pins host chunks into `device`'s reserve until it holds `bytes` (tests, benchmarks: a warm
  // reserve without waiting for the background thread). OUT_OF_MEMORY past UVMPOOL_HOST_LIMIT.
  CUresult fill_host_reserve(int device, std::size_t bytes);

  // Gives idle memory (free chunks, cached mappings, empty slabs) of every device back to the driver;
  // with `keep_chunks`, only takes the cached mappings and empty slabs apart, keeping their chunks.
  void release_idle(bool keep_chunks = false);
  // Whether a fence is due on some device (a synchronous free since its last fence), and the fence
  // itself: waits for the program's queued work under each such device's pool lock, after which idle
  // mappings are taken apart without waiting. For tiering's mover, which prepares with MoveWaits::NoWait
  // and fences this way only while none of its holds stand.
  bool fence_due() const;
  void fence_freed();

  DeviceStats stats(int device) const;
  // The pool's counters recomputed from its structures, per device; the differences, one per line
  // ("" when none). For tests, between operations, with no other thread in the pool.
  std::string check_invariants();
  int device_count() const;

  // After fork: the child cannot use the parent's CUDA state; forget it all without driver calls.
  void abandon();
  // At exit: stops the background reserve thread (waits for its driver call in flight, if any).
  void stop_background();
  // Who is told before and after each of the pool's own waits for the device (device_waits.h):
  // tiering's mover, whose holds such a wait must not meet. `expected`: replaced only if it is the
  // one installed (a mover that stops takes only itself away).
  void set_device_waits(DeviceWaits* waits, DeviceWaits* expected);

 private:
  DevicePool* device_pool(int device);  // made on first use
  CUresult current_device(int* device, CUcontext* context);
  // The device of `ctx`, which is current (asked of the driver once a thread and context).
  CUresult device_of_current(CUcontext ctx, int* device);
  // Frees held during a capture (held_frees.h). held_already: `p` is held, so its free is a double
  // free (told, INVALID_VALUE in *result). hold_during_capture: the free of `p` (the live allocation of
  // `owner` at `e`) held when a capture is under way in `wait_for` (nullptr: its allocation's context),
  // answering the free's result; nullopt, not held. release_held: the held frees whose capture is
  // over, and those of `destroying`, made now.
  bool held_already(CUdeviceptr p, CUresult* result);
  std::optional<CUresult> hold_during_capture(DevicePool* owner, std::uintptr_t e, CUdeviceptr p, CUcontext wait_for);
  void release_held(CUcontext destroying = nullptr);
  bool freed_but_held(CUdeviceptr base) const;  // a free of the allocation at `base` is held
  // Gives back what an external handle's memory counted, once the driver no longer keeps it.
  void uncount_external(const std::optional<ExternalHandles::Counted>& ended);

  const driver::Table& driver_;
  PoolConfig config_;
  std::unique_ptr<HostTier> host_;
  struct Devices;
  std::unique_ptr<Devices> devices_;
};

}  // namespace uvmpool::pool
