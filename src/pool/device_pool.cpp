// A device pool's entry points: which allocator serves a request, frees, and the answers about an
// allocation.
#include <algorithm>

#include "config/log.h"
#include "config/size_math.h"
#include "pool/device_pool.h"
#include "trace/trace.h"

namespace uvmpool::pool {
CUresult DevicePool::allocate(CUdeviceptr* out, std::size_t bytes, CUcontext context, const CarvedRange::Hint& hint) {
  // More than both tiers can never fit (and would overflow the chunk arithmetic below).
  const std::uint64_t most = sat_add(budget_, host_ ? host_tier_->limit() : 0);
  // Guard mode takes every size down its own path (guard.cpp): no slabs, no cached mappings. Carving,
  // when on, takes small requests too: a slab is a mapping of its own, which carving saves (modeled on
  // the churn replay, docs/benchmarks.md: 13.2 -> 6.4 ms), at about three times a slot's CPU cost.
  const CUresult r = bytes > most             ? CUDA_ERROR_OUT_OF_MEMORY
                     : config_.guard       ? allocate_guarded(out, bytes, context)
                     : carves(bytes)       ? allocate_carved(out, bytes, context, hint)
                     : bytes <= small_max_ ? allocate_small(out, bytes, context)
                                           : allocate_large(out, bytes, context);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    fig_.oom.fetch_add(1, std::memory_order_relaxed);
    trace::record(trace::Kind::Oom, device_, 0, bytes);
    const DeviceStats s = stats();
    const std::uint64_t live_device = s.live_bytes - s.live_host_bytes;
    if (s.carved_mapped_bytes > s.carved_live_bytes + s.carved_idle_bytes) {
      // Free space inside carved slots that still hold allocations serves only carved requests that fit
      // in it: say so, since the figures below count it as held.
      log::warn("device {}: {} MiB free inside carved slots could not hold it (UVMPOOL_CARVE_MAX=0 turns carving off)",
                device_, (s.carved_mapped_bytes - s.carved_live_bytes - s.carved_idle_bytes) >> 20);
    }
    if (host_) {
      log::warn("device {}: out of memory for {} bytes: device {} MiB live, {} MiB held of UVMPOOL_DEVICE_LIMIT {} MiB; "
                "host {} MiB live, {} MiB pinned of UVMPOOL_HOST_LIMIT {} MiB",
                device_, bytes, live_device >> 20, (s.chunks_held * s.chunk_size) >> 20, budget_ >> 20,
                s.live_host_bytes >> 20, host_tier_->charged() >> 20, host_tier_->limit() >> 20);
    } else {
      log::warn("device {}: out of memory for {} bytes: device {} MiB live, {} MiB held of UVMPOOL_DEVICE_LIMIT {} MiB; "
                "spilling to host memory is off",
                device_, bytes, live_device >> 20, (s.chunks_held * s.chunk_size) >> 20, budget_ >> 20);
    }
  }
  return r;
}

CUresult DevicePool::allocate_async(CUdeviceptr* out, std::size_t bytes, CUcontext context, const StreamKey& stream) {
  // Where this point of the program was placed last (repeat_places.h), under each of its names in
  // turn: an open free on the stream there, else a cached mapping there, else carved there if free;
  // else as any other allocation.
  const RepeatPlaces::Places wants = config_.repeat_places ? repeat_.last_places(bytes) : RepeatPlaces::Places{};
  if (!reuse_on_stream(stream, bytes, context, wants, out)) {
    bool taken = false;
    const bool small = !carves(bytes) && bytes <= small_max_;  // a slot: never a mapping of its own
    for (std::size_t i = 0; i < wants.size() && !taken && !config_.guard && !small; ++i)
      if (wants[i] != 0) taken = take_cached_at(wants[i], bytes, context, out);
    if (!taken) {
      if (const CUresult r = allocate(out, bytes, context, placing(wants, bytes)); r != CUDA_SUCCESS) return r;
    }
  }
  if (config_.repeat_places) {
    repeat_.placed(bytes, *out);
    if (wants[0] != 0 && counters_) {
      const bool kept = std::find(wants.begin(), wants.end(), *out) != wants.end();
      (kept ? fig_.repeat_places_kept : fig_.repeat_places_missed).fetch_add(1, std::memory_order_relaxed);
    }
  }
  return CUDA_SUCCESS;
}

CarvedRange::Hint DevicePool::placing(std::span<const CUdeviceptr> wants, std::size_t bytes) {
  CarvedRange::Hint hint{wants, {}};
  if (config_.repeat_places)
    hint.avoid = [this, bytes](CUdeviceptr at, std::size_t n) { return repeat_.others_place(at, n, bytes); };
  return hint;
}

CUresult DevicePool::deallocate(Entry entry, CUdeviceptr p, CUcontext wait_for) {
  repeat_.freed(p);  // allocated on a stream, maybe
  if (Slab* s = as_slab(entry)) return free_small(s, p, false);
  if (as_carved(entry) != nullptr) return free_carved(p, nullptr, false);
  Block* b = as_block(entry);
  // Guard mode unmaps at once, after waiting for the work of the context it was allocated in.
  if (config_.guard) return free_guarded(b, p, wait_for != nullptr ? wait_for : b->context.load(std::memory_order_relaxed));
  return free_large(b, p);
}

CUresult DevicePool::deallocate_async(Entry entry, CUdeviceptr p, const StreamKey& stream, bool capturing) {
  // Guard mode unmaps at once, after waiting for the work of the freeing stream's context; memory
  // freed inside a capture stays mapped for good, as below.
  repeat_.freed(p);
  if (config_.guard && !capturing && as_slab(entry) == nullptr) return free_guarded(as_block(entry), p, stream.context);
  if (as_carved(entry) != nullptr) return free_carved(p, &stream, capturing);
  PendingItem item;
  if (Slab* s = as_slab(entry)) {
    if (const CUresult r = free_small(s, p, true); r != CUDA_SUCCESS) return r;
    item.slab = s;
    item.slot = static_cast<std::uint32_t>((p - s->base) / s->slot_size);
  } else {
    Block* b = as_block(entry);
    if (const CUdeviceptr start = b->start(b->size.load(std::memory_order_relaxed), chunk_); p != start) {
      log::error("free of {:#x}: an interior pointer of a pool allocation at {:#x}; ignored", p, start);
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int freed = capturing ? kQuarantined : kPending;
    note_free_begun(b);
    bool unpublished = false;
    for (int expected = kLive; !b->state.compare_exchange_strong(expected, freed | kFreeing, std::memory_order_acq_rel);
         expected = kLive) {
      if (expected != (kLive | kMoving)) {
        log::error("free of {:#x}: already freed (double free); ignored", p);
        return CUDA_ERROR_INVALID_VALUE;
      }
      // Pieces of it are changing tier (move.cpp). The free does not wait for the move, which may
      // stand until the program's work reaches a hold placed ahead: it becomes a pending (or, in a
      // capture, quarantined) free of a mapping being moved (free_while_moving).
      if ((unpublished = free_while_moving(b, freed))) break;
      // Not Live | kMoving any more: its move ended (Live: freed as any), or another free came first
      // (told at once: a free waiting out the move could free the next allocation given it).
      if (base_state(b->state.load(std::memory_order_acquire)) != kLive) {
        log::error("free of {:#x}: already freed (double free); ignored", p);
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (!unpublished) {
      if (auto* hook = testing::in_free_window.load(std::memory_order_relaxed)) hook(p);
      unpublish(b, false);
      b->state.store(freed, std::memory_order_release);  // a move may claim it from here on
    }
    item.block = b;
  }
  if (capturing) {
    // Freed inside a graph capture: the graph may run (and touch it) any number of times later, so
    // the memory is never reused and its address never remapped.
    log::debug("free of {:#x} during stream capture: kept out of reuse for good", p);
    return CUDA_SUCCESS;
  }
  add_pending(stream, item);
  return CUDA_SUCCESS;
}

bool DevicePool::free_while_moving(Block* b, int freed) {
  // Under mu_, which kMoving and the pieces change under: the commit, before or after, and the live
  // figures agree on its host bytes (swap_pieces counts a live mapping's only). The move goes on with
  // a freed mapping; its copy is made unless the free began before the hold's mark (copy_move: then
  // no work may read it). A pending one is binned by release_pending and end_move once both are done,
  // a cached one by end_move; a quarantined one (freed in a capture) never is, and no later move
  // claims it.
  MutexLock lock(mu_);
  int moving = kLive | kMoving;
  if (!b->state.compare_exchange_strong(moving, freed | kMoving, std::memory_order_acq_rel)) return false;
  // Work queued before a synchronous free may still use it: taking it apart once binned fences first.
  if (freed == kCached) note_sync_free(b->context.load(std::memory_order_relaxed));
  unpublish(b, false);  // the free is counted here, not by the bin end_move puts it in
  return true;
}

std::optional<AllocationInfo> DevicePool::describe(Entry entry, CUdeviceptr p) {
  if (as_carved(entry) != nullptr) return describe_carved(p);
  AllocationInfo info;
  info.device = device_;
  if (Slab* s = as_slab(entry)) {
    MutexLock lock(slabs_->of(s).mu);
    if (s->state.load(std::memory_order_relaxed) != kLive || p < s->base) return std::nullopt;
    const std::uint64_t slot = (p - s->base) / s->slot_size;
    if (slot >= s->slots || ((s->live[slot / 64] >> (slot % 64)) & 1) == 0 || s->info[slot].pending) return std::nullopt;
    const SlotInfo& si = s->info[slot];
    info.base = s->base + slot * s->slot_size;
    if (p - info.base >= si.size) return std::nullopt;  // past the allocation, in its slot's rounding
    info.size = si.size;
    info.context = si.context;
    info.buffer_id = si.buffer_id;
    return info;
  }
  Block* b = as_block(entry);
  if (base_state(b->state.load(std::memory_order_acquire)) != kLive) return std::nullopt;  // moving or not
  info.size = b->size.load(std::memory_order_relaxed);
  info.base = b->start(info.size, chunk_);
  if (p - info.base >= info.size) return std::nullopt;  // past the allocation, in its last chunk's rounding
  info.context = b->context.load(std::memory_order_relaxed);
  info.buffer_id = b->buffer_id.load(std::memory_order_relaxed);
  return info;
}

// Pieces change only under mu_ (a move commits under it), and once exported they never move: the
// other process maps these handles. A move under way is waited for first.
std::optional<ChunkView> DevicePool::chunks_of(Entry entry, CUdeviceptr p) {
  if (as_carved(entry) != nullptr) {
    UniqueMutexLock lock(mu_);
    // A move of its slots is waited for first: they are about to change handles. The end of a move
    // is announced on move_cv_; the range is read under mu_, so each look is bounded, not missed.
    while (carved_moving(p)) {
      lock.unlock();
      {
        UniqueMutexLock wait(move_mu_);
        move_cv_.wait_for(wait.native(), std::chrono::milliseconds(1));
      }
      lock.lock();
    }
    return carved_chunks(p);
  }
  const auto moving = [entry] {
    if (const Slab* s = as_slab(entry)) return s->moving.load(std::memory_order_acquire);
    return (as_block(entry)->state.load(std::memory_order_acquire) & kMoving) != 0;
  };
  UniqueMutexLock lock(mu_);
  while (moving()) {  // a move claims under mu_, so none begins once this sees none
    lock.unlock();
    if (const Slab* s = as_slab(entry)) {
      wait_while_moving(s);
    } else {
      wait_while_moving(as_block(entry));
    }
    lock.lock();
  }
  if (map_.lookup(p) != entry) return std::nullopt;  // freed meanwhile and its range reused
  const std::optional<AllocationInfo> info = describe(entry, p);
  if (!info) return std::nullopt;
  ChunkView view;
  view.info = *info;
  view.chunk_size = chunk_;
  bool device = false, host = false;
  if (Slab* s = as_slab(entry)) {
    s->exported = true;
    view.offset = info->base - s->base;
    view.chunks.push_back(s->chunk.handle);
    view.granules.push_back(1);
    (s->chunk.tier == Tier::Host ? host : device) = true;
  } else {
    Block* b = as_block(entry);
    b->exported = true;
    view.offset = info->base - b->base;
    for (const Chunk& c : b->chunks) {
      view.chunks.push_back(c.handle);
      view.granules.push_back(c.granules);
      (c.tier == Tier::Host ? host : device) = true;
    }
  }
  view.host_chunks = host;
  view.exportable = (!device || vmm_.exportable(Tier::Device)) && (!host || vmm_.exportable(Tier::Host));
  return view;
}

}  // namespace uvmpool::pool
