// The device pool as placement's stock (placement.h): each call carries out one step the rule asked
// for, with the pool's own mechanisms (chunks.cpp, large_blocks.cpp, slabs.cpp, carving.cpp,
// host_runs.cpp), and decides nothing. The pieces taken go into the request's vector; a whole mapping
// taken is kept for the caller (reused()).
#include "pool/stock.h"

#include "config/log.h"
#include "config/size_math.h"

namespace uvmpool::pool {

DevicePool::PoolStock::PoolStock(DevicePool& pool, std::vector<Chunk>* pieces, bool runs)
    : p_(pool), pieces_(pieces), runs_(runs) {
  pieces_->clear();
}

DevicePool::PoolStock::~PoolStock() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { p_.check_free_pieces(); }

std::size_t DevicePool::PoolStock::free_device() { return p_.free_granules(); }

bool DevicePool::PoolStock::free_extent() { return p_.free_.extents() != 0; }

std::size_t DevicePool::PoolStock::growable() { return p_.growable_chunks(); }

void DevicePool::PoolStock::grow(std::size_t granules) {
  if (const CUresult r = p_.grow(granules); r != CUDA_SUCCESS) {
    log::debug("device {}: growth by {} chunks failed ({})", p_.device_, granules, static_cast<int>(r));
  }
}

std::size_t DevicePool::PoolStock::reclaim(placement::Idle source, std::size_t granules) {
  using placement::Idle;
  switch (source) {
    case Idle::CachedMappings: {
      const std::size_t before = p_.free_granules();
      p_.evict_cached(granules);
      return p_.free_granules() - before;
    }
    case Idle::EmptySlabs:
      return p_.evict_empty_slabs();  // a slab is one chunk
    case Idle::CarvedSlots:
      return p_.release_carved_idle(granules);
    case Idle::SpilledMappings:
      return p_.evict_spilled(true);
    case Idle::HostRuns: {
      if (!p_.host_) return 0;
      const std::size_t before = p_.host_->size();
      p_.unmap_host_runs(sat_add(before, granules));
      return p_.host_->size() - before;
    }
    case Idle::AllHostMappings: {
      if (!p_.host_) return 0;
      // And carved slots left in host memory holding nothing (DevicePool::release_emptied_slot).
      const std::size_t slots = p_.release_idle_host_slots();
      return p_.evict_spilled(false) + (slots != 0 ? slots * (p_.carve_range_->extent() / p_.chunk_) : 0);
    }
  }
  return 0;
}

bool DevicePool::PoolStock::reuse(placement::Whole whole, std::size_t granules) {
  using placement::Whole;
  switch (whole) {
    case Whole::JoinedCachedMappings: reused_ = p_.carve_cached(granules); break;
    case Whole::SpilledOfTheSize: reused_ = p_.host_ ? p_.take_cached_spilled(granules) : nullptr; break;
    case Whole::HostRun: reused_ = p_.host_ ? p_.take_host_run(granules) : nullptr; break;
    case Whole::None: reused_ = nullptr; break;
  }
  return reused_ != nullptr;
}

std::size_t DevicePool::PoolStock::take_device(std::size_t granules) {
  return p_.pull_device_pieces(granules, pieces_, runs_);
}

std::size_t DevicePool::PoolStock::loose_host() { return p_.host_ ? p_.host_->size() : 0; }

bool DevicePool::PoolStock::take_host(std::size_t granules) {
  if (!p_.host_) return false;
  return p_.host_->take(granules, pieces_) == CUDA_SUCCESS;  // appended after the device pieces
}

void DevicePool::PoolStock::give_back() {
  p_.return_chunks(*pieces_);
  pieces_->clear();
}

}  // namespace uvmpool::pool
