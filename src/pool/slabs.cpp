// Small allocations: slots of one size class cut from a slab (one chunk mapped on its own), so a
// program with a million small tensors does not pay a chunk each. The classes' lists and slot bits
// are a part of their own (slab_classes.h); making, mapping and taking apart a slab are here. One
// empty slab per class is kept for the next allocation; more are taken apart.
#include <atomic>

#include "config/log.h"
#include "pool/device_pool.h"
#include "trace/trace.h"

namespace uvmpool::pool {

CUresult DevicePool::allocate_small(CUdeviceptr* out, std::size_t bytes, CUcontext context) {
  const int cls = small_class(bytes);
  SlabClasses::Class& c = slabs_->of(cls);
  std::uint64_t host_bytes = 0;
  for (;;) {
    {
      MutexLock lock(c.mu);
      Slab* s = nullptr;
      std::uint32_t slot = 0;
      if (slabs_->take_slot(c, &s, &slot)) {
        s->info[slot] = SlotInfo{next_buffer_id(), context, static_cast<std::uint32_t>(bytes), false};
        *out = s->base + static_cast<CUdeviceptr>(slot) * s->slot_size;
        host_bytes = s->chunk.tier == Tier::Host ? bytes : 0;
        bump(c.allocations);
        break;
      }
    }
    Slab* s = nullptr;
    if (!pending_.empty() && collect_pending(false)) continue;
    if (const CUresult r = with_pressure_relief([&] { return new_slab(cls, &s); }); r != CUDA_SUCCESS) return r;
    MutexLock lock(c.mu);
    slabs_->add(c, s);
  }
  note_allocated(*out, bytes, host_bytes, true);
  return CUDA_SUCCESS;
}

CUresult DevicePool::free_small(Slab* s, CUdeviceptr p, bool pending) {
  // The class is read before its lock is held, and new_slab rewrites it (under mu_ only) when it
  // recycles a dead slab: a free racing that (a stale pointer) reads it atomically and again under
  // the lock, and follows the slab to its new class.
  int cls = std::atomic_ref(s->cls).load(std::memory_order_relaxed);
  std::unique_lock class_lock(slabs_->of(cls).mu.native());
  for (int now; (now = std::atomic_ref(s->cls).load(std::memory_order_relaxed)) != cls; cls = now) {
    class_lock.unlock();
    class_lock = std::unique_lock(slabs_->of(now).mu.native());
  }
  // Its chunk may be changing tier (move.cpp): the free does not wait for that, as tiering's moves may
  // stand until the program's work reaches a hold placed ahead. The tier is read under the class lock,
  // which the commit changes it under, and the commit counts the live slots as they are then.
  SlabClasses::Class& c = slabs_->of(cls);
  std::size_t size = 0;
  bool destroy = false;
  bool host = false;
  {
    const CUdeviceptr offset = p - s->base;
    const std::uint32_t slot = s->slot_size == 0 ? UINT32_MAX : static_cast<std::uint32_t>(offset / s->slot_size);
    if (s->state.load(std::memory_order_relaxed) != kLive || p < s->base || slot >= s->slots) {
      log::error("free of {:#x}: not a live pool allocation (double free?); ignored", p);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (offset % s->slot_size != 0) {
      log::error("free of {:#x}: an interior pointer of a pool allocation at {:#x}; ignored", p,
                 s->base + static_cast<CUdeviceptr>(slot) * s->slot_size);
      return CUDA_ERROR_INVALID_VALUE;
    }
    const bool live = (s->live[slot / 64] >> (slot % 64)) & 1;
    if (!live || s->info[slot].pending) {
      log::error("free of {:#x}: already freed (double free); ignored", p);
      return CUDA_ERROR_INVALID_VALUE;
    }
    size = s->info[slot].size;
    // Read under the lock: once it is dropped, the slab may be emptied, destroyed and recycled by
    // new_slab, which rewrites its chunk.
    host = s->chunk.tier == Tier::Host;
    bump(c.frees);
    if (pending) {
      s->info[slot].pending = true;  // stays taken until the stream's work is done
    } else {
      note_sync_free(s->info[slot].context);
      destroy = slabs_->free_slot(c, s, slot);
    }
    class_lock.unlock();
  }
  note_freed(p, size, host ? size : 0, true);
  if (destroy) {
    MutexLock lock(mu_);
    destroy_slab(s);
  }
  return CUDA_SUCCESS;
}

void DevicePool::release_slot(Slab* s, std::uint32_t slot) {
  SlabClasses::Class& c = slabs_->of(s);
  bool destroy = false;
  {
    MutexLock lock(c.mu);
    destroy = slabs_->free_slot(c, s, slot);  // one moving stays alive (SlabClasses::free_slot)
  }
  if (destroy) {
    MutexLock lock(mu_);
    destroy_slab(s);
  }
}

CUresult DevicePool::new_slab(int cls, Slab** out) {
  MutexLock lock(mu_);
  std::vector<Chunk> chunk;
  if (const CUresult r = take_chunks(1, &chunk); r != CUDA_SUCCESS) return r;
  const std::uint64_t started = trace::recording() ? trace::now() : 0;
  CUdeviceptr va = 0;
  CUresult r = take_range(chunk_, &va);
  if (r == CUDA_SUCCESS) {
    r = vmm_.map(va, chunk, chunk_);
    if (r != CUDA_SUCCESS) ranges_.give_back(va, chunk_);
  }
  if (r != CUDA_SUCCESS) {
    return_chunks(chunk);
    return r;
  }
  if (chunk[0].tier == Tier::Host) fig_.host_mapped.fetch_add(1, std::memory_order_relaxed);
  trace::record(trace::Kind::Map, device_, va, chunk_, chunk[0].tier == Tier::Host ? chunk_ : 0, started);
  Slab* s = nullptr;
  if (!spare_slabs_.empty()) {
    s = spare_slabs_.back();
    spare_slabs_.pop_back();
  } else {
    s = new Slab;
    all_slabs_.push_back(s);
  }
  s->owner = this;
  s->base = va;
  s->chunk = chunk[0];
  std::atomic_ref(s->cls).store(cls, std::memory_order_relaxed);  // free_small reads it unlocked
  s->slot_size = static_cast<std::uint32_t>(class_size(cls));
  s->slots = static_cast<std::uint32_t>(chunk_ / s->slot_size);
  s->used = 0;
  s->hint = 0;
  s->live.assign((s->slots + 63) / 64, 0);
  if (s->slots % 64 != 0) s->live.back() = ~std::uint64_t{0} << (s->slots % 64);  // no slots past the end
  s->info.assign(s->slots, SlotInfo{});
  s->listed = false;
  s->exported = false;
  s->prev = s->next = nullptr;
  s->state.store(kLive, std::memory_order_release);
  map_.set(va, chunk_, reinterpret_cast<Entry>(s) | kSlabTag);
  mark_tiers(va, {&s->chunk, 1});
  *out = s;
  return CUDA_SUCCESS;
}

void DevicePool::destroy_slab(Slab* s) {
  fence_unmap();
  map_.set(s->base, chunk_, 0);
  const bool unmapped = vmm_.unmap(s->base, {&s->chunk, 1}, chunk_) == Vmm::Unmapped::Whole;
  trace::record(trace::Kind::Unmap, device_, s->base, chunk_, s->chunk.tier == Tier::Host ? chunk_ : 0);
  if (unmapped) ranges_.give_back(s->base, chunk_);  // else still mapped: kept out of use (destroy_block)
  return_chunks({&s->chunk, 1});
  if (s->chunk.tier == Tier::Host) fig_.host_mapped.fetch_sub(1, std::memory_order_relaxed);
  s->live.clear();
  s->info.clear();
  spare_slabs_.push_back(s);
}

std::size_t DevicePool::evict_empty_slabs() {
  const std::vector<Slab*> empty = slabs_->take_empty();
  for (Slab* s : empty) destroy_slab(s);
  return empty.size();
}

}  // namespace uvmpool::pool
