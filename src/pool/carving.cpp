// Carving in the device pool (UVMPOOL_CARVE_MAX; docs/architecture.md, "Carving"): requests up to
// carve_max, small ones included (a slab would be a mapping of its own), are carved out of one range
// of extents mapped once (carved_range.h) instead of getting a mapping of their own. The range takes
// its extents through the pool's own chunk layer (placement's Purpose::Slot, so the budget and the
// reclaim order hold) and gives them back there; the address map names this pool, tagged, for every
// granule of a mapped slot, and a pointer is resolved to its allocation through the pool's ordered
// index of carved allocations. What the device has no extent for takes the stitched path, which
// spills.
//
// Locks: mu_ for the range (every change to it), then carve_index_mu_ (a leaf) for the pool's index of
// carved allocations, which lookups take alone; a free on a stream taken back by the same stream
// (stream_reuse.cpp) changes only its index entry, under carve_index_mu_ alone.
//
// Moves: a slot changes tier whole, with the allocations in it (carved_moves.cpp). Memory freed on a
// stream is taken back at once by an allocation on the same stream of the same rounded size, and by
// anyone once its work is done. CUDA IPC exports the slots an
// allocation lies in, whose handles the neighbouring allocations share (as a slab's chunk does its
// slots).
#include "config/log.h"
#include "config/size_math.h"
#include "pool/device_pool.h"
#include "pool/placement.h"
#include "pool/stock.h"
#include "trace/trace.h"

namespace uvmpool::pool {

// The range's side of the pool. Called from inside CarvedRange's allocate and release_idle, which
// run under mu_ (the analysis cannot follow the call through the range).
class DevicePool::CarveSource : public CarvedRange::Source {
 public:
  explicit CarveSource(DevicePool& pool) : p_(pool) {}

  CUresult take(std::size_t granules, std::vector<Chunk>* pieces) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
    // Where placement puts a slot (placement.h): device memory, one extent if it can be.
    PoolStock stock(p_, pieces);
    const placement::Ask ask{placement::Purpose::Slot, granules, p_.host_ != nullptr};
    return placement::place(stock, ask).refused ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  }
  CUresult take_group(std::size_t granules, Chunk* piece) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
    // New memory only, within the budget: free extents are taken one a slot first (take), and
    // nothing is taken apart for a group.
    if (p_.free_.extents() != 0 || p_.growable_chunks() < granules) return CUDA_ERROR_OUT_OF_MEMORY;
    Handle h = 0;
    if (p_.vmm_.create_chunks({&h, 1}, granules * p_.chunk_) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    p_.note_grown(granules);
    p_.fig_.chunks_free.fetch_sub(granules, std::memory_order_relaxed);  // taken at once
    p_.fig_.extents_held.fetch_add(1, std::memory_order_relaxed);        // one handle of several chunks
    *piece = Chunk{h, Tier::Device, static_cast<std::uint32_t>(granules)};
    return CUDA_SUCCESS;
  }
  void give_back(std::span<const Chunk> pieces) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { p_.return_chunks(pieces); }
  void before_unmap() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { p_.fence_unmap(); }
  void mapped(CUdeviceptr va, std::span<const Chunk> pieces) override {
    const std::size_t bytes = granules_of(pieces) * p_.chunk_;
    p_.map_.set(va, bytes, p_.carved_entry());
    p_.mark_tiers(va, pieces);
    p_.fig_.stitched_maps.fetch_add(1, std::memory_order_relaxed);
    trace::record(trace::Kind::Map, p_.device_, va, bytes, 0);
  }
  void unmapped(CUdeviceptr va, std::span<const Chunk> pieces) override {
    const std::size_t bytes = granules_of(pieces) * p_.chunk_;
    // A slot moved to host memory (carved_moves.cpp) held host chunks in a mapping.
    p_.fig_.host_mapped.fetch_sub(host_granules_of(pieces), std::memory_order_relaxed);
    p_.map_.set(va, bytes, 0);
    p_.map_.set_host(va, bytes, false);
    trace::record(trace::Kind::Unmap, p_.device_, va, bytes, 0);
  }

 private:
  DevicePool& p_;
};

CUresult DevicePool::allocate_carved(CUdeviceptr* out, std::size_t bytes, CUcontext context,
                                     const CarvedRange::Hint& hint) {
  // Memory freed on streams whose work is done is free in the range once collected: before the range
  // grows (which takes idle memory apart and grows the pool), the mapped free space, then that.
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!pending_.empty()) {
    r = try_carve(out, bytes, context, false, hint);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) collect_pending(false);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) r = try_carve(out, bytes, context, true, hint);
  // No extent for it on the device: the stitched path, which takes what chunks are left and spills.
  if (r == CUDA_ERROR_OUT_OF_MEMORY) r = allocate_large(out, bytes, context);
  return r;
}

CUresult DevicePool::try_carve(CUdeviceptr* out, std::size_t bytes, CUcontext context, bool grow,
                               const CarvedRange::Hint& hint) {
  MutexLock lock(mu_);
  if (!carve_range_) {
    // Twice the budget in whole extents: room for the holes that moving idle slots leaves.
    const std::size_t extent = extent_granules_ * chunk_;
    const std::size_t size = 2 * div_ceil(budget_, extent) * extent;
    // Aligned to the extent, so that slots lie at the addresses a slot's size divides (the driver's
    // large pages, and slot boundaries anyone can compute): an extent more is taken, the rest given back.
    CUdeviceptr taken = 0;
    if (const CUresult r = take_range(size + extent, &taken); r != CUDA_SUCCESS) {
      log::warn("device {}: no address space for carving ({} MiB); carving is off", device_, size >> 20);
      carve_max_.store(0, std::memory_order_relaxed);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const CUdeviceptr va = div_ceil(taken, extent) * extent;
    if (va > taken) ranges_.give_back(taken, va - taken);
    if (taken + extent > va) ranges_.give_back(va + size, taken + extent - va);
    carve_source_ = std::make_unique<CarveSource>(*this);
    carve_range_.emplace(vmm_, *carve_source_, va, size, extent, chunk_, kGuardAlignment, 0, config_.carve_group);
    carve_base_.store(va, std::memory_order_release);
  }
  CUdeviceptr p = 0;
  CUresult r = CUDA_SUCCESS;
  {
    // Reclaim (placement, from the range's own growth) leaves the range's slots alone meanwhile.
    struct Carving {
      bool& flag;
      explicit Carving(bool& f) : flag(f) { flag = true; }
      ~Carving() { flag = false; }
    } carving(carving_);
    r = carve_range_->allocate(bytes, &p, grow, hint);
  }
  note_carved_idle();
  if (r != CUDA_SUCCESS) return r;
  {
    MutexLock index(carve_index_mu_);
    carved_info_[p] = CarvedAllocation{bytes, context, next_buffer_id(), kLive};
  }
  bump(fig_.carved_allocations[size_bucket(bytes)]);  // under mu_
  note_allocated(p, bytes, 0, true);
  *out = p;
  return CUDA_SUCCESS;
}

CUresult DevicePool::free_carved(CUdeviceptr p, const StreamKey* stream, bool capturing) {
  CarvedAllocation a;
  {
    MutexLock lock(mu_);
    {
      MutexLock index(carve_index_mu_);
      auto it = carved_info_.find(p);
      if (it == carved_info_.end() || it->second.state != kLive) {
        auto in = carved_info_.upper_bound(p);
        if (in != carved_info_.begin() && (--in)->first != p && p - in->first < in->second.size) {
          log::error("free of {:#x}: an interior pointer of a pool allocation at {:#x}; ignored", p, in->first);
        } else {
          log::error("free of {:#x}: already freed (double free); ignored", p);
        }
        return CUDA_ERROR_INVALID_VALUE;
      }
      a = it->second;
      // Freed inside a graph capture: the graph may touch it whenever it runs, so it stays allocated
      // in the range for good. Freed on a stream: pending until that stream's work is done.
      it->second.state = capturing ? kQuarantined : kPending;
      if (!capturing && stream == nullptr) carved_info_.erase(it);
    }
    bump(fig_.carved_frees);  // under mu_
    note_freed(p, a.size, carved_host_bytes(p, a.size), true);
    if (capturing) {
      log::debug("free of {:#x} during stream capture: kept out of reuse for good", p);
      return CUDA_SUCCESS;
    }
    if (stream == nullptr) {
      // cuMemFree: free in the range at once (stream order covers the program's later work, as for
      // cached mappings); unmapping it later waits for the device (fence_unmap).
      note_sync_free(a.context);
      (void)carve_range_->free(p);
      release_idle_host_slots();
      note_carved_idle();
      return CUDA_SUCCESS;
    }
  }
  add_pending(*stream, PendingItem{.carved = p, .carved_bytes = a.size});
  return CUDA_SUCCESS;
}

void DevicePool::release_carved(CUdeviceptr p) {
  MutexLock lock(mu_);
  {
    MutexLock index(carve_index_mu_);
    auto it = carved_info_.find(p);
    if (it == carved_info_.end() || it->second.state != kPending) {
      log::error("device {}: a carved allocation freed on a stream at {:#x} was not pending; left alone", device_, p);
      return;
    }
    carved_info_.erase(it);
  }
  (void)carve_range_->free(p);
  release_idle_host_slots();
  note_carved_idle();
}

std::optional<AllocationInfo> DevicePool::describe_carved(CUdeviceptr p) {
  MutexLock index(carve_index_mu_);
  auto it = carved_info_.upper_bound(p);
  if (it == carved_info_.begin()) return std::nullopt;
  --it;
  // Past the allocation (in its rounding, or beyond): none; a pending or quarantined one is freed.
  if (p - it->first >= it->second.size || it->second.state != kLive) return std::nullopt;
  AllocationInfo info;
  info.device = device_;
  info.base = it->first;
  info.size = it->second.size;
  info.context = it->second.context;
  info.buffer_id = it->second.buffer_id;
  return info;
}

std::vector<AllocationInfo> DevicePool::describe_carved_within(CUdeviceptr from, CUdeviceptr to) {
  std::vector<AllocationInfo> out;
  MutexLock index(carve_index_mu_);
  auto it = carved_info_.upper_bound(from);
  if (it != carved_info_.begin()) --it;  // one that begins before `from` may reach into it
  for (; it != carved_info_.end() && it->first < to; ++it) {
    if (it->second.state != kLive || it->first + it->second.size <= from) continue;
    out.push_back({.base = it->first, .size = it->second.size, .device = device_, .context = it->second.context,
                   .buffer_id = it->second.buffer_id});
  }
  return out;
}

std::optional<ChunkView> DevicePool::carved_chunks(CUdeviceptr p) {
  const std::optional<AllocationInfo> info = describe_carved(p);
  if (!info) return std::nullopt;
  ChunkView view;
  view.info = *info;
  view.chunk_size = chunk_;
  CUdeviceptr first = 0;
  bool device = false, host = false;
  for (const Chunk& c : carve_range_->pieces_of(info->base, info->size, &first)) {
    view.chunks.push_back(c.handle);
    view.granules.push_back(c.granules);
    (c.tier == Tier::Host ? host : device) = true;
  }
  // Another process maps these handles: the slots never move again (chunks_of waited for a move).
  carve_range_->mark_exported(info->base, info->size);
  view.offset = info->base - first;
  view.host_chunks = host;
  view.exportable = (!device || vmm_.exportable(Tier::Device)) && (!host || vmm_.exportable(Tier::Host));
  return view;
}

void DevicePool::note_carved_idle() {
  if (!carve_range_) return;
  const CarvedRange::Figures f = carve_range_->figures();
  fig_.carved_idle.store(f.slots_idle * extent_granules_, std::memory_order_relaxed);
  fig_.carved_mapped.store((f.slots_mapped - f.slots_host) * carve_range_->extent(), std::memory_order_relaxed);
  fig_.carved_live.store(f.live_bytes, std::memory_order_relaxed);
}

std::size_t DevicePool::release_carved_idle(std::size_t granules) {
  if (!carve_range_ || carving_ || granules == 0) return 0;
  const std::size_t released = carve_range_->release_idle(div_ceil(granules, extent_granules_));
  note_carved_idle();
  return released * extent_granules_;
}

void DevicePool::check_carved(std::string& out, std::uint64_t* device_granules, std::uint64_t* host_granules,
                              std::uint64_t* extents, std::uint64_t* live, std::uint64_t* live_host) {
  if (!carve_range_) return;
  out += carve_range_->check_invariants();
  carve_range_->for_each_mapped([&](CUdeviceptr va, std::span<const Chunk> pieces) {
    for (const Chunk& c : pieces) {
      check_marks(out, va, c);
      va += c.granules * chunk_;
      if (c.tier == Tier::Host) {
        *host_granules += c.granules;
        continue;
      }
      *device_granules += c.granules;
      if (c.granules > 1) ++*extents;
      if (map_.lookup(va - chunk_) != carved_entry()) out += "the address map does not name the carved range at a mapped slot\n";
    }
  });
  MutexLock index(carve_index_mu_);
  for (const auto& [p, a] : carved_info_) {
    if (a.state == kLive) {
      *live += a.size;
      *live_host += carved_host_bytes(p, a.size);
    }
    const std::optional<CarvedRange::Found> in = carve_range_->find(p);
    if (!in || in->start != p || in->bytes < a.size) out += "a carved allocation the range does not hold\n";
  }
  if (carved_info_.size() != carve_range_->figures().allocations)
    out += "carved allocations: the pool knows " + std::to_string(carved_info_.size()) + ", the range holds " +
           std::to_string(carve_range_->figures().allocations) + "\n";
  if (fig_.carved_idle.load() != carve_range_->idle_slots() * extent_granules_) out += "carved_idle differs from the range's idle slots\n";
}

}  // namespace uvmpool::pool
