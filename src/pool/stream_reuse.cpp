// Stream-ordered reuse. Memory freed with cuMemFreeAsync on a stream may still be read by work
// queued on that stream, so it is reused at once only by allocations on the same stream (stream
// order makes that safe) and by others only once an event recorded on the freeing stream has
// completed (the part that keeps such frees: pending_frees.h). Here: the pool's side of it, and the
// fences and waits for the device that frees and moves need.
#include <algorithm>
#include <optional>

#include "config/log.h"
#include "driver/context_scope.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {
using ScopedContext = driver::ContextScope;

void DevicePool::note_sync_free(CUcontext context) {
  // On every free: shared loads, and the lock only when the flag turns on or another context than the
  // last one noted frees, so that threads freeing at once do not bounce this cache line. Under
  // unfenced_mu_ the flag on means the last context noted is in the list (fence_unmap clears all
  // three together), so the fast path never skips a context the next fence would not wait for.
  if (unfenced_.load(std::memory_order_acquire) && unfenced_context_.load(std::memory_order_relaxed) == context) return;
  MutexLock lock(unfenced_mu_);
  if (std::find(unfenced_contexts_.begin(), unfenced_contexts_.end(), context) == unfenced_contexts_.end())
    unfenced_contexts_.push_back(context);
  unfenced_context_.store(context, std::memory_order_relaxed);
  unfenced_.store(true, std::memory_order_release);
}

void DevicePool::wait_for_context(CUcontext context) {
  ScopedContext in(d_, context);
  const DeviceWaitScope waiting(device_waits_);  // mu_ is held: no hold may stand meanwhile
  if (const CUresult r = d_.cuCtxSynchronize(); r != CUDA_SUCCESS)
    log::debug("device {}: waiting for the device before a move: error {}", device_, static_cast<int>(r));
}

void DevicePool::fence_unmap() {
  if (!unfenced_.load(std::memory_order_acquire)) return;
  std::vector<CUcontext> contexts;
  {
    // The flag, the last context and the list cleared together: a free noted after this is in the
    // next fence's list. (Cleared apart, a free could turn the flag on again between the two with
    // its context already in the list taken here, and every later free of that context pass the
    // fast path while the next fence's list stayed empty: an unmap with no wait.)
    MutexLock lock(unfenced_mu_);
    if (!unfenced_.load(std::memory_order_relaxed)) return;  // another fence took them
    unfenced_.store(false, std::memory_order_relaxed);
    unfenced_context_.store(nullptr, std::memory_order_relaxed);
    contexts.swap(unfenced_contexts_);
  }
  if (process_exiting()) return;  // the driver may be going away; nothing runs after exit anyway
  std::vector<CUcontext> capturing;
  {
    const DeviceWaitScope waiting(device_waits_);  // mu_ is held: no hold may stand meanwhile
    for (CUcontext context : contexts) {
      ScopedContext in(d_, context);
      if (in.status() != CUDA_SUCCESS) continue;  // destroyed since: its work is gone with it
      // The wait would spoil the capture (captures.h): left for the first fence after it.
      if (captures_.under_way(context)) {
        capturing.push_back(context);
        continue;
      }
      if (const CUresult r = d_.cuCtxSynchronize(); r != CUDA_SUCCESS)
        log::debug("device {}: waiting for the device before unmapping freed memory: error {}", device_, static_cast<int>(r));
    }
  }
  if (capturing.empty()) return;
  log::debug("device {}: {} context(s) capturing a graph: their wait before an unmap is left for after the capture",
             device_, capturing.size());
  MutexLock lock(unfenced_mu_);
  for (CUcontext context : capturing)
    if (std::find(unfenced_contexts_.begin(), unfenced_contexts_.end(), context) == unfenced_contexts_.end())
      unfenced_contexts_.push_back(context);
  unfenced_context_.store(unfenced_contexts_.back(), std::memory_order_relaxed);
  unfenced_.store(true, std::memory_order_release);
}

void DevicePool::fence_freed() {
  MutexLock lock(mu_);
  fence_unmap();
}

bool DevicePool::reuse_on_stream(const StreamKey& stream, std::size_t bytes, CUcontext context,
                                 std::span<const CUdeviceptr> wants, CUdeviceptr* out) {
  if (pending_.empty()) return false;
  const bool carved = carves(bytes);
  const bool small = !carved && bytes <= small_max_;
  const std::size_t granules = div_ceil(bytes, chunk_);
  const int cls = small ? small_class(bytes) : -1;
  const std::size_t rounded = div_ceil(bytes, kGuardAlignment);  // as the carved range rounds
  // A large one of exactly the size, else one within_rounding (a mapping a cut rounded up to an
  // extent's end comes back for the size that made it); a slot of the class; a carved one of the
  // same rounded size.
  const auto rank = [&](const PendingItem& i) {
    if (i.carved != 0 || carved) return i.carved != 0 && carved && div_ceil(i.carved_bytes, kGuardAlignment) == rounded ? 2 : 0;
    // A mapping being moved is left to the move (move.cpp); its granules change only under mu_ and
    // only while it is claimed, so they are read safely here.
    const bool fits = small ? i.slab != nullptr && i.slab->cls == cls
                            : i.block != nullptr && within_rounding(i.block->granules, granules) &&
                                  i.block->state.load(std::memory_order_acquire) == kPending;
    if (!fits) return 0;
    return small || i.block->granules == granules ? 2 : 1;
  };
  // Published below: Dead meanwhile, so that no move claims it (claim_block leaves Dead alone); a move
  // that claimed it since wins, and the allocation goes elsewhere. Only at a `want`, one being moved
  // is taken too (Dead | kMoving: the move goes on, end_move bins no Dead one), as take_cached_at
  // takes a cached one: its address is what the learned step names.
  bool moving_ok = false;
  const auto claim = [&moving_ok](const PendingItem& i) {
    if (i.block == nullptr) return true;
    for (int state = i.block->state.load(std::memory_order_acquire);;) {
      if (state != kPending && (state != (kPending | kMoving) || !moving_ok)) return false;
      if (i.block->state.compare_exchange_weak(state, kDead | (state & kMoving), std::memory_order_acq_rel)) return true;
    }
  };
  // First one at a `want`, where this point of the program was placed last (repeat_places.h), of
  // the same size: a stitched mapping there serves a carved size too (it is where that size spilled).
  CUdeviceptr want = 0;
  const auto at_want = [&](const PendingItem& i) {
    if (i.carved != 0) return i.carved == want && carved && div_ceil(i.carved_bytes, kGuardAlignment) == rounded;
    if (i.slab != nullptr)
      return small && i.slab->cls == cls && i.slab->base + static_cast<CUdeviceptr>(i.slot) * i.slab->slot_size == want;
    return !small && i.block->granules == granules && i.block->start(bytes, chunk_) == want &&
           base_state(i.block->state.load(std::memory_order_acquire)) == kPending;
  };
  std::optional<PendingItem> item;
  moving_ok = true;
  for (std::size_t k = 0; k < wants.size() && !item; ++k)
    if ((want = wants[k]) != 0) item = pending_.take_wanted(stream, at_want, claim);
  moving_ok = false;
  if (!item) item = pending_.take_on_stream(stream, rank, claim);
  if (!item) return false;
  if (item->block != nullptr) {
    count_cache_hit();
    if ((item->block->state.load(std::memory_order_acquire) & kMoving) != 0) {
      // Its pieces change under mu_ until the move ends: published under it, so that the commit
      // (swap_pieces) and the live figures agree on its host bytes, whichever comes first.
      MutexLock lock(mu_);
      publish(item->block, bytes, context, out, false);
    } else {
      publish(item->block, bytes, context, out, false);
    }
    return true;
  }
  if (item->carved != 0) {
    // Pending since its free on this stream, and no one else's now: it changes under the index's lock
    // alone (no piece of the range changes, which is what mu_ guards).
    std::uint64_t host = 0;
    {
      MutexLock index(carve_index_mu_);
      carved_info_[item->carved] = CarvedAllocation{bytes, context, next_buffer_id(), kLive};
      host = carved_host_bytes(item->carved, bytes);  // its slot may have moved to host memory (carved_moves.cpp)
    }
    count_cache_hit();
    note_allocated(item->carved, bytes, host, false);
    *out = item->carved;
    return true;
  }
  Slab* s = item->slab;
  bool host = false;
  {
    SlabClasses::Class& c = slabs_->of(s);
    MutexLock lock(c.mu);
    s->info[item->slot] = SlotInfo{next_buffer_id(), context, static_cast<std::uint32_t>(bytes), false};
    host = s->chunk.tier == Tier::Host;  // under the lock a move changes it under (move.cpp)
    bump(c.allocations);
  }
  *out = s->base + static_cast<CUdeviceptr>(item->slot) * s->slot_size;
  note_allocated(*out, bytes, host ? bytes : 0, true);
  return true;
}

void DevicePool::add_pending(const StreamKey& stream, PendingItem item) {
  if (const std::optional<PendingItem> now = pending_.add(stream, item)) release_pending(*now);
}

bool DevicePool::collect_pending(bool wait) {
  const std::vector<PendingItem> ready = pending_.collect(wait);
  for (const PendingItem& item : ready) release_pending(item);
  return !ready.empty();
}

void DevicePool::seal_stream(CUstream stream) {
  for (const PendingItem& item : pending_.seal(stream)) release_pending(item);
}

void DevicePool::forget_context(CUcontext context) {
  if (context == nullptr || process_exiting()) return;
  bool unfenced = false;
  {
    MutexLock lock(unfenced_mu_);
    unfenced = std::find(unfenced_contexts_.begin(), unfenced_contexts_.end(), context) != unfenced_contexts_.end();
  }
  // Memory it freed at once may be read by its queued work until the destruction, which waits for
  // that work only once it is called: waited for here, before the next fence forgets the context.
  if (unfenced) wait_for_context(context);
  for (const PendingItem& item : pending_.forget_context(context)) release_pending(item);
  // The flag stays as it is; with the last context noted cleared, the next free of any context takes
  // the lock, so the fast path never skips a context missing from the list.
  MutexLock lock(unfenced_mu_);
  std::erase(unfenced_contexts_, context);
  if (unfenced_context_.load(std::memory_order_relaxed) == context) unfenced_context_.store(nullptr, std::memory_order_relaxed);
}

void DevicePool::release_pending(const PendingItem& item) {
  if (item.carved != 0) {
    release_carved(item.carved);
    return;
  }
  if (Block* b = item.block) {
    // Cached now; one that is moving is binned when its move ends (move.cpp).
    for (int state = kPending;;) {
      const int next = state == kPending ? kCached : kCached | kMoving;
      if (b->state.compare_exchange_weak(state, next, std::memory_order_acq_rel)) {
        if (next == kCached) cache_block(b);
        return;
      }
      if (state != kPending && state != (kPending | kMoving)) {
        log::error("device {}: a mapping freed on a stream was found in state {}; left alone", device_, state);
        return;
      }
    }
  } else {
    release_slot(item.slab, item.slot);
  }
}

CUresult DevicePool::with_pressure_relief(const std::function<CUresult()>& attempt) {
  const std::uint64_t landed_before = host_ ? host_->landings() : 0;
  CUresult r = attempt();
  if (r != CUDA_ERROR_OUT_OF_MEMORY) return r;
  // Host chunks the reserve thread holds in flight (being pinned, premapped or unpinned) are no one's
  // to take: hold the thread off, wait for them to land, and try again against all the tier holds
  // when anything landed since the attempt began (HostReserve::Hold). The hold lasts through the
  // retries below, so the thread cannot take again what they need. Called without mu_, which a
  // premap in flight needs to land.
  {
    std::optional<HostReserve::Hold> hold;
    if (host_) {
      hold.emplace(*host_);
      if (host_->landings() != landed_before) r = attempt();
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY || pending_.empty()) return r;
    // Out of memory while memory freed on streams waits for their work: take what has finished, then
    // wait for the rest — a stall, but better than failing an allocation the pool can cover.
    if (collect_pending(false)) r = attempt();
  }
  // The wait below is for the program's work, which may be long: the reserve thread is not held off
  // meanwhile, only again for the retry. (Two holds, each made once: GCC 12 took a std::optional
  // reset and made again for possibly uninitialized.)
  if (r == CUDA_ERROR_OUT_OF_MEMORY && collect_pending(true)) {
    std::optional<HostReserve::Hold> hold;
    if (host_) hold.emplace(*host_);
    r = attempt();
  }
  return r;
}

}  // namespace uvmpool::pool
