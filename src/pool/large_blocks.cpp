// Large allocations: any free chunks stitched into one contiguous range, and the cache of freed
// mappings that makes a steady alloc/free pattern free of driver calls.
#include <algorithm>

#include "config/log.h"
#include "pool/device_pool.h"
#include "pool/placement.h"
#include "pool/stock.h"
#include "trace/trace.h"

namespace uvmpool::pool {

std::uint64_t host_bytes_of(const Block* b, std::size_t bytes, std::size_t chunk) {
  if (b->host_chunks == 0) return 0;
  // Host pieces may lie anywhere in the mapping (moves change tiers piece by piece), and under guard
  // the allocation begins inside it: the overlap of [begin, end) with each host piece.
  const std::uint64_t begin = b->start(bytes, chunk) - b->base;
  const std::uint64_t end = begin + bytes;
  std::uint64_t at = 0, host = 0;
  for (const Chunk& c : b->chunks) {
    const std::uint64_t next = at + std::uint64_t{c.granules} * chunk;
    if (c.tier == Tier::Host && next > begin && at < end) host += std::min(next, end) - std::max(at, begin);
    at = next;
    if (at >= end) break;
  }
  return host;
}

void DevicePool::publish(Block* b, std::size_t bytes, CUcontext context, CUdeviceptr* out, bool counted) {
  b->size.store(bytes, std::memory_order_relaxed);
  b->context.store(context, std::memory_order_relaxed);
  b->buffer_id.store(next_buffer_id(), std::memory_order_relaxed);
  // A mapping being moved keeps its claim (take_cached_at and reuse_on_stream publish one under mu_,
  // which kMoving changes under); no other can be claimed meanwhile (claim_block leaves Dead alone
  // and cannot withdraw a cached one taken out of its bin).
  b->state.store(kLive | (b->state.load(std::memory_order_acquire) & kMoving), std::memory_order_release);
  *out = b->start(bytes, chunk_);
  note_allocated(*out, bytes, b->host_chunks != 0 ? host_bytes_of(b, bytes, chunk_) : 0, counted);
}

void DevicePool::note_allocated(CUdeviceptr p, std::size_t bytes, std::uint64_t host_bytes, bool counted) {
  trace::record(trace::Kind::Alloc, device_, p, bytes, host_bytes);
  const std::uint64_t live = fig_.live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::uint64_t live_host = 0;
  if (host_bytes != 0) {
    live_host = fig_.live_host_bytes.fetch_add(host_bytes, std::memory_order_relaxed) + host_bytes;
    fig_.spilled.fetch_add(1, std::memory_order_relaxed);
  }
  if (!counters_) return;
  if (!counted) fig_.allocations[size_bucket(bytes)].fetch_add(1, std::memory_order_relaxed);
  raise_peak(fig_.peak_live, live);
  if (host_bytes != 0) {
    raise_peak(fig_.peak_live_host, live_host);
  } else {
    live_host = fig_.live_host_bytes.load(std::memory_order_relaxed);
  }
  raise_peak(fig_.peak_live_device, live > live_host ? live - live_host : 0);
}

void DevicePool::note_freed(CUdeviceptr p, std::size_t bytes, std::uint64_t host_bytes, bool counted) {
  trace::record(trace::Kind::Free, device_, p, bytes, host_bytes);
  fig_.live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  if (host_bytes != 0) fig_.live_host_bytes.fetch_sub(host_bytes, std::memory_order_relaxed);
  if (counters_ && !counted) fig_.frees.fetch_add(1, std::memory_order_relaxed);
}

CUresult DevicePool::allocate_large(CUdeviceptr* out, std::size_t bytes, CUcontext context) {
  const std::size_t granules = div_ceil(bytes, chunk_);
  if (Block* b = take_cached(granules)) {  // counted as a cache hit by its bin
    publish(b, bytes, context, out, true);
    return CUDA_SUCCESS;
  }
  // Memory freed on streams whose work has finished becomes cached mappings first: maybe one fits.
  if (!pending_.empty() && collect_pending(false)) {
    if (Block* b = take_cached(granules)) {
      publish(b, bytes, context, out, true);
      return CUDA_SUCCESS;
    }
  }
  Block* b = nullptr;
  const CUresult r = with_pressure_relief([&] { return build_block(granules, &b); });
  if (r != CUDA_SUCCESS) return r;
  if (b->state.load(std::memory_order_relaxed) == kCached) count_cache_hit();
  publish(b, bytes, context, out, false);
  return CUDA_SUCCESS;
}

CUresult DevicePool::free_large(Block* b, CUdeviceptr p) {
  if (p != b->base) {
    log::error("free of {:#x}: an interior pointer of a pool allocation at {:#x}; ignored", p, b->base);
    return CUDA_ERROR_INVALID_VALUE;
  }
  note_free_begun(b);
  for (int expected = kLive; !b->state.compare_exchange_strong(expected, kCached, std::memory_order_acq_rel); expected = kLive) {
    // Pieces of it are changing tier (move.cpp). The free does not wait for the move, which may stand
    // until the program's work reaches a hold placed ahead: the mapping is cached when the move ends.
    if (expected == (kLive | kMoving) && free_while_moving(b, kCached)) return CUDA_SUCCESS;
    // Not Live | kMoving: freed already (told at once: a free waiting out the move could free the
    // next allocation given it), or its move just ended and it is Live again.
    if (base_state(b->state.load(std::memory_order_acquire)) != kLive) {
      log::error("free of {:#x}: already freed (double free); ignored", p);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  note_sync_free(b->context.load(std::memory_order_relaxed));
  unpublish(b, /*counted=*/b->host_chunks == 0);  // a device-only mapping's bin counts the free
  cache_block(b, true);
  return CUDA_SUCCESS;
}

void DevicePool::unpublish(Block* b, bool counted) {
  const std::size_t bytes = b->size.load(std::memory_order_relaxed);
  note_freed(b->start(bytes, chunk_), bytes, b->host_chunks != 0 ? host_bytes_of(b, bytes, chunk_) : 0, counted);
}

void DevicePool::cache_block(Block* b, bool count_free) {
  // The caller owns it (freed, its move ended, or cut from another): its pieces change only under a
  // move's claim, and a mapping freed while claimed is left to end_move to bin.
  UVMPOOL_CHECK(b->granules == granules_of(b->chunks) && b->host_chunks == host_granules_of(b->chunks),
                "a cached mapping's pieces cover it and its host count is theirs");
  b->state.store(kCached, std::memory_order_release);
  fig_.chunks_cached.fetch_add(b->granules - b->host_chunks, std::memory_order_relaxed);
  if (b->host_chunks == 0) {
    cache_.put(b, count_free);
    return;
  }
  // Counted before it is binned, so that a taker's decrement never comes first.
  if (b->host_run()) {
    host_->premapped(static_cast<std::ptrdiff_t>(b->granules));
  } else {
    fig_.host_cached.fetch_add(b->host_chunks, std::memory_order_relaxed);
  }
  cache_.put_with_host(b);
}

Block* DevicePool::take_cached(std::size_t granules) {
  Block* b = cache_.take(granules);
  if (b != nullptr) fig_.chunks_cached.fetch_sub(b->granules, std::memory_order_relaxed);
  return b;
}

bool DevicePool::take_cached_at(CUdeviceptr want, std::size_t bytes, CUcontext context, CUdeviceptr* out) {
  const std::size_t granules = div_ceil(bytes, chunk_);
  // Cached, or cached and being moved: tiering promotes a freed mapping ahead of the allocation it
  // has learned comes back there, and that allocation often comes while the move's remap runs (on
  // the H200, row 4b under backend:cudaMallocAsync, a third of the places missed once moves began).
  // Going elsewhere then would change the address the learned step names.
  const auto fits = [&](const Block* b) {
    if (b == nullptr || b->owner != this || b->base != want || b->granules != granules || b->guard != 0) return false;
    const int state = b->state.load(std::memory_order_acquire);
    return state == kCached || state == (kCached | kMoving);
  };
  // A look without the lock first: mu_ is held across moves' driver calls, and most places asked for
  // are not a cached mapping (a carved or slab address, or taken again).
  if (!fits(as_block(map_.lookup(want)))) return false;
  // Under mu_, as every taker of cached mappings but the bins' fast path, which withdraw_cached loses
  // to cleanly. A descriptor is never freed (spare_blocks_), so one read from the map stays one.
  MutexLock lock(mu_);
  Block* b = as_block(map_.lookup(want));
  if (!fits(b)) return false;
  if ((b->state.load(std::memory_order_acquire) & kMoving) != 0) {
    // Out of its bin since the move claimed it (claim_block), and its pieces and kMoving change only
    // under mu_, held: published now, the move goes on with a live mapping, as any other (end_move
    // clears kMoving and bins only a cached one).
    count_cache_hit();
    publish(b, bytes, context, out, false);
    return true;
  }
  // One with host pieces only where the device cannot hold the request (the placement rule: device
  // memory first, free, idle or grown; placement.h). Idle: device chunks in other cached mappings and
  // in idle carved slots.
  if (b->host_chunks != 0) {
    const std::size_t idle = fig_.chunks_cached.load(std::memory_order_relaxed) - (b->granules - b->host_chunks) +
                             fig_.carved_idle.load(std::memory_order_relaxed);
    if (free_granules() + idle + growable_chunks() >= granules) return false;
  }
  if (!withdraw_cached(b)) return false;
  count_cache_hit();
  publish(b, bytes, context, out, false);
  return true;
}

Block* DevicePool::take_cached_spilled(std::size_t granules) {
  Block* b = cache_.take_spilled(granules);
  if (b == nullptr) return nullptr;
  fig_.chunks_cached.fetch_sub(b->granules - b->host_chunks, std::memory_order_relaxed);
  fig_.host_cached.fetch_sub(b->host_chunks, std::memory_order_relaxed);
  return b;
}

std::size_t DevicePool::evict_spilled(bool only_with_device_chunks) {
  std::vector<Block*> runs;
  std::vector<Block*> victims = cache_.take_spilled_all(only_with_device_chunks, !only_with_device_chunks, &runs);
  for (const Block* b : victims) fig_.host_cached.fetch_sub(b->host_chunks, std::memory_order_relaxed);
  for (Block* b : runs) {
    host_->premapped(-static_cast<std::ptrdiff_t>(b->granules));
    victims.push_back(b);
  }
  std::size_t chunks = 0;
  for (Block* b : victims) {
    fig_.chunks_cached.fetch_sub(b->granules - b->host_chunks, std::memory_order_relaxed);
    chunks += b->granules;
    destroy_block(b);
  }
  return chunks;
}

CUresult DevicePool::build_block(std::size_t granules, Block** out) {
  MutexLock lock(mu_);
  const std::uint64_t started = trace::recording() ? trace::now() : 0;
  std::vector<Chunk> pieces;
  PoolStock stock(*this, &pieces);
  const placement::Plan plan = placement::place(stock, {placement::Purpose::Mapping, granules, host_ != nullptr});
  if (plan.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  if (plan.whole != placement::Whole::None) {
    *out = stock.reused();  // still marked Cached: the caller counts a cache hit
    return CUDA_SUCCESS;
  }
  return map_pieces(std::move(pieces), 0, started, out);
}

CUresult DevicePool::map_new_block(std::size_t granules, std::size_t guard, Block** out) {
  const std::uint64_t started = trace::recording() ? trace::now() : 0;
  std::vector<Chunk> chunks;
  if (const CUresult r = take_chunks(granules, &chunks); r != CUDA_SUCCESS) return r;
  return map_pieces(std::move(chunks), guard, started, out);
}

CUresult DevicePool::map_pieces(std::vector<Chunk>&& chunks, std::size_t guard, std::uint64_t started, Block** out) {
  const auto give_chunks_back = [&]() UVMPOOL_REQUIRES(mu_) { return_chunks(chunks); };
  const std::size_t bytes = granules_of(chunks) * chunk_;
  CUdeviceptr va = 0;
  if (const CUresult r = take_range(bytes + guard, &va); r != CUDA_SUCCESS) {
    give_chunks_back();
    return r;
  }
  if (const CUresult r = vmm_.map(va, chunks, chunk_); r != CUDA_SUCCESS) {
    give_chunks_back();
    ranges_.give_back(va, bytes + guard);
    return r;
  }
  *out = make_block(va, std::move(chunks));  // published as Live by the caller
  (*out)->guard = guard;
  fig_.stitched_maps.fetch_add(1, std::memory_order_relaxed);
  trace::record(trace::Kind::Map, device_, va, bytes, (*out)->host_chunks * chunk_, started);
  return CUDA_SUCCESS;
}

Block* DevicePool::make_block(CUdeviceptr va, std::vector<Chunk>&& chunks) {
  Block* b = nullptr;
  if (!spare_blocks_.empty()) {
    b = spare_blocks_.back();
    spare_blocks_.pop_back();
  } else {
    b = new Block;
    all_blocks_.push_back(b);
  }
  b->owner = this;
  b->base = va;
  b->granules = granules_of(chunks);
  b->host_chunks = host_granules_of(chunks);
  fig_.host_mapped.fetch_add(b->host_chunks, std::memory_order_relaxed);
  b->chunks = std::move(chunks);
  b->guard = 0;
  b->binned = false;
  b->exported = false;
  b->freed_at.store(kNeverFreed, std::memory_order_relaxed);
  b->state.store(kDead, std::memory_order_relaxed);
  map_.set(va, b->granules * chunk_, reinterpret_cast<Entry>(b));
  mark_tiers(va, b->chunks);
  return b;
}

void DevicePool::mark_tiers(CUdeviceptr base, std::span<const Chunk> pieces) {
  for (const Chunk& c : pieces) {
    map_.set_host(base, c.granules * chunk_, c.tier == Tier::Host);
    base += c.granules * chunk_;
  }
}

void DevicePool::destroy_block(Block* b) {
  fence_unmap();
  const std::size_t bytes = b->granules * chunk_;
  map_.set(b->base, bytes, 0);
  const bool unmapped = vmm_.unmap(b->base, b->chunks, chunk_) == Vmm::Unmapped::Whole;
  trace::record(trace::Kind::Unmap, device_, b->base, bytes, b->host_chunks * chunk_);
  if (b->guard != 0) {
    retire_guarded(b->base, bytes + b->guard);
  } else if (unmapped) {
    ranges_.give_back(b->base, bytes);
  }  // else still mapped there: the range stays out of use, as Vmm::unmap said
  // Their handles may still be mapped at the old range too: a handle may be mapped at two addresses, and
  // the old one is never used again; the driver frees such memory only once both are unmapped.
  return_chunks(b->chunks);
  fig_.host_mapped.fetch_sub(b->host_chunks, std::memory_order_relaxed);
  b->chunks.clear();
  b->guard = 0;
  b->granules = 0;
  b->host_chunks = 0;
  b->state.store(kDead, std::memory_order_release);
  spare_blocks_.push_back(b);
  fig_.broken.fetch_add(1, std::memory_order_relaxed);
}

std::size_t DevicePool::shrink_block(Block* b, std::size_t n) {
  // Whole pieces from its end, at least n granules: an extent is unmapped only whole.
  std::size_t cut = b->chunks.size(), freed = 0;
  while (freed < n && cut > 0) freed += b->chunks[--cut].granules;
  if (cut == 0) {
    destroy_block(b);
    return freed;
  }
  fence_unmap();
  const std::size_t keep = b->granules - freed;
  const CUdeviceptr tail = b->base + keep * chunk_;
  const std::span<const Chunk> gone = std::span<const Chunk>(b->chunks).subspan(cut);
  map_.set(tail, freed * chunk_, 0);
  const bool unmapped = vmm_.unmap(tail, gone, chunk_) == Vmm::Unmapped::Whole;
  if (trace::recording()) {
    trace::record(trace::Kind::Unmap, device_, tail, freed * chunk_, host_granules_of(gone) * chunk_);
  }
  if (unmapped) ranges_.give_back(tail, freed * chunk_);  // else still mapped: kept out of use (destroy_block)
  return_chunks(gone);  // a device-only mapping's, or a host run's (trim_premapped)
  b->chunks.resize(cut);
  b->granules = keep;
  fig_.broken.fetch_add(1, std::memory_order_relaxed);
  cache_block(b);  // the rest stays a cached mapping, smaller
  return freed;
}

bool DevicePool::evict_cached(std::size_t wanted) {
  // The least recently freed mapping of the smallest count that covers the shortfall gives up just
  // enough chunks; failing that, the largest cached mappings are taken apart whole.
  std::size_t got = 0;
  while (got < wanted && fig_.chunks_cached.load(std::memory_order_relaxed) != 0) {
    const std::size_t need = wanted - got;
    Block* victim = cache_.victim(need);
    if (victim == nullptr) break;
    fig_.chunks_cached.fetch_sub(victim->granules, std::memory_order_relaxed);
    if (victim->granules > need) {
      got += shrink_block(victim, need);
    } else {
      got += victim->granules;
      destroy_block(victim);
    }
  }
  return got >= wanted;
}

}  // namespace uvmpool::pool
