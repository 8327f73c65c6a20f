// Stream-ordered reuse. Memory freed with cuMemFreeAsync on a stream may still be read by work
// queued on that stream, so it is reused at once only by allocations on the same stream (stream
// order makes that safe) and by others only once an event recorded on the freeing stream has
// completed. Events are recorded lazily — when someone else needs memory — one per stream for all
// its frees since, so freeing costs no driver call. The per-thread default stream can only be named
// by its own thread, so its frees record their event at once.
#include <optional>

#include "config/log.h"
#include "driver/context_scope.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {
using ScopedContext = driver::ContextScope;

void DevicePool::note_sync_free(CUcontext context) {
  // On every free: a shared load, and stores only when the flag turns on (once per fence), so that
  // threads freeing at once do not bounce this cache line between them.
  if (unfenced_.load(std::memory_order_relaxed)) return;
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
  if (!unfenced_.load(std::memory_order_acquire) || !unfenced_.exchange(false, std::memory_order_acq_rel)) return;
  if (process_exiting()) return;  // the driver may be going away; nothing runs after exit anyway
  ScopedContext in(d_, unfenced_context_.load(std::memory_order_relaxed));
  const DeviceWaitScope waiting(device_waits_);  // mu_ is held: no hold may stand meanwhile
  if (const CUresult r = d_.cuCtxSynchronize(); r != CUDA_SUCCESS)
    log::debug("device {}: waiting for the device before unmapping freed memory: error {}", device_, static_cast<int>(r));
}

void DevicePool::fence_freed() {
  MutexLock lock(mu_);
  fence_unmap();
}

CUevent DevicePool::take_event() {
  if (!spare_events_.empty()) {
    CUevent e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (d_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

bool DevicePool::reuse_on_stream(const StreamKey& stream, std::size_t bytes, CUcontext context, CUdeviceptr* out) {
  if (pending_count_.load(std::memory_order_relaxed) == 0) return false;
  const bool small = bytes <= small_max_;
  const std::size_t granules = div_ceil(bytes, chunk_);
  const int cls = small ? small_class(bytes) : -1;
  PendingItem item;
  {
    MutexLock lock(async_mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return false;
    auto& open = it->second.open;
    auto match = open.end();
    // The most recently freed first; a large one of exactly the size, else one within_rounding (a
    // mapping a cut rounded up to an extent's end comes back for the size that made it).
    for (auto i = open.rbegin(); i != open.rend(); ++i) {
      // A mapping being moved is left to the move (move.cpp); its granules change only under mu_
      // and only while it is claimed, so they are read safely here.
      const bool fits = small ? i->slab != nullptr && i->slab->cls == cls
                              : i->block != nullptr && within_rounding(i->block->granules, granules) &&
                                    i->block->state.load(std::memory_order_acquire) == kPending;
      if (!fits) continue;
      if (match == open.end()) match = std::next(i).base();
      if (small || i->block->granules == granules) {
        match = std::next(i).base();
        break;
      }
    }
    if (match == open.end()) return false;
    // Published below: Dead meanwhile, so that no move claims it (claim_block leaves Dead alone).
    if (int pending = kPending; match->block != nullptr && !match->block->state.compare_exchange_strong(pending, kDead, std::memory_order_acq_rel)) {
      return false;  // a move claimed it since: allocate elsewhere
    }
    item = *match;
    *match = open.back();
    open.pop_back();
    pending_count_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (item.block != nullptr) {
    count_cache_hit();
    publish(item.block, bytes, context, out, false);
    return true;
  }
  Slab* s = item.slab;
  bool host = false;
  {
    MutexLock lock(classes_[s->cls].mu);
    s->info[item.slot] = SlotInfo{next_buffer_id(), context, static_cast<std::uint32_t>(bytes), false};
    host = s->chunk.tier == Tier::Host;  // under the lock a move changes it under (move.cpp)
    bump(classes_[s->cls].allocations);
  }
  *out = s->base + static_cast<CUdeviceptr>(item.slot) * s->slot_size;
  note_allocated(*out, bytes, host ? bytes : 0, true);
  return true;
}

void DevicePool::add_pending(const StreamKey& stream, PendingItem item) {
  pending_count_.fetch_add(1, std::memory_order_relaxed);
  if (stream.stream != CU_STREAM_PER_THREAD) {
    MutexLock lock(async_mu_);
    streams_[stream].open.push_back(item);
    return;
  }
  UniqueMutexLock lock(async_mu_);
  CUevent e = take_event();
  if (e != nullptr && d_.cuEventRecord(e, CU_STREAM_PER_THREAD) == CUDA_SUCCESS) {
    batches_.push_back(Batch{e, {item}});
    return;
  }
  if (e != nullptr) spare_events_.push_back(e);
  lock.unlock();
  // No event: wait for the stream here rather than risk reusing memory it may still touch.
  d_.cuStreamSynchronize(CU_STREAM_PER_THREAD);
  pending_count_.fetch_sub(1, std::memory_order_relaxed);
  release_pending(item);
}

bool DevicePool::collect_pending(bool wait) {
  if (pending_count_.load(std::memory_order_relaxed) == 0 || process_exiting()) return false;
  std::vector<PendingItem> ready;
  {
    MutexLock lock(async_mu_);
    for (auto it = streams_.begin(); it != streams_.end();) {
      seal_locked(it->first, it->second, &ready);
      it = streams_.erase(it);  // streams come and go; keep no entry for an idle one
    }
    std::optional<DeviceWaitScope> waiting;  // async_mu_ is held, which an allocation under mu_ may wait for
    if (wait && !batches_.empty()) waiting.emplace(device_waits_);
    for (auto it = batches_.begin(); it != batches_.end();) {
      const CUresult r = wait ? d_.cuEventSynchronize(it->event) : d_.cuEventQuery(it->event);
      if (r == CUDA_ERROR_NOT_READY) {
        ++it;
        continue;
      }
      if (r != CUDA_SUCCESS) log::warn("device {}: waiting for freed stream memory: event error {}", device_, static_cast<int>(r));
      ready.insert(ready.end(), it->items.begin(), it->items.end());
      spare_events_.push_back(it->event);
      it = batches_.erase(it);
    }
    pending_count_.fetch_sub(ready.size(), std::memory_order_relaxed);
  }
  for (const PendingItem& item : ready) release_pending(item);
  return !ready.empty();
}

void DevicePool::seal_locked(const StreamKey& key, StreamFrees& frees, std::vector<PendingItem>* ready) {
  if (frees.open.empty()) return;
  ScopedContext in(d_, key.context);
  CUevent e = take_event();
  if (e != nullptr && d_.cuEventRecord(e, key.stream) == CUDA_SUCCESS) {
    batches_.push_back(Batch{e, std::move(frees.open)});
  } else {
    // Events fail (or the stream is already gone): its work may still run, so wait for the whole
    // context before reusing what was freed on it.
    if (e != nullptr) spare_events_.push_back(e);
    const DeviceWaitScope waiting(device_waits_);  // async_mu_ is held
    d_.cuCtxSynchronize();
    ready->insert(ready->end(), frees.open.begin(), frees.open.end());
  }
  frees.open.clear();
}

void DevicePool::seal_stream(CUstream stream) {
  if (pending_count_.load(std::memory_order_relaxed) == 0 || process_exiting()) return;
  std::vector<PendingItem> ready;
  {
    MutexLock lock(async_mu_);
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (it->first.stream != stream) {
        ++it;
        continue;
      }
      seal_locked(it->first, it->second, &ready);
      it = streams_.erase(it);
    }
    pending_count_.fetch_sub(ready.size(), std::memory_order_relaxed);
  }
  for (const PendingItem& item : ready) release_pending(item);
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
  std::optional<HostReserve::Hold> hold;
  if (host_) {
    hold.emplace(*host_);
    if (host_->landings() != landed_before) r = attempt();
  }
  if (r != CUDA_ERROR_OUT_OF_MEMORY || pending_count_.load(std::memory_order_relaxed) == 0) return r;
  // Out of memory while memory freed on streams waits for their work: take what has finished, then
  // wait for the rest — a stall, but better than failing an allocation the pool can cover.
  if (collect_pending(false)) r = attempt();
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    // The wait below is for the program's work, which may be long: the reserve thread is not held
    // off meanwhile, only again for the retry.
    hold.reset();
    if (collect_pending(true)) {
      if (host_) hold.emplace(*host_);
      r = attempt();
    }
  }
  return r;
}

}  // namespace uvmpool::pool
