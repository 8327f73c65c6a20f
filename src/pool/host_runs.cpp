// Host runs: mappings made only of host chunks, built ahead of need by the reserve thread (and left by
// freed allocations that lay wholly in host memory). Mapping a host chunk costs about 70 us on an H200
// (cuMemMap plus its share of cuMemSetAccess), against a target of 50 us per 2 MiB for a spill, so the
// mapping work is done off the allocation path: an allocation the device has no room for takes the
// smallest run that covers it and splits it — no driver call, since every chunk is its own mapping and
// a run's access was set when it was built.
#include <algorithm>

#include "config/log.h"
#include "pool/device_pool.h"
#include "trace/trace.h"

namespace uvmpool::pool {
namespace {

// Chunks per premapped run: 64 MiB at 2 MiB, a few milliseconds of mapping per step of the thread.
constexpr std::size_t kRunChunks = 32;

}  // namespace

Block* DevicePool::take_host_run(std::size_t granules) {
  Block* b = cache_.take_host_run(granules);
  if (b == nullptr) return nullptr;
  host_->premapped(-static_cast<std::ptrdiff_t>(b->granules));
  if (b->granules > granules) {
    // The rest stays a run of its own at the same addresses: only descriptors change.
    std::vector<Chunk> rest(b->chunks.begin() + static_cast<std::ptrdiff_t>(granules), b->chunks.end());
    b->chunks.resize(granules);
    b->granules = granules;
    b->host_chunks = granules;
    fig_.host_mapped.fetch_sub(rest.size(), std::memory_order_relaxed);  // make_block counts them again
    Block* r = make_block(b->base + granules * chunk_, std::move(rest));
    cache_block(r);
  }
  host_->note_take(granules);
  return b;
}

void DevicePool::unmap_host_runs(std::size_t n) {
  while (host_->size() < n) {
    Block* b = cache_.take_host_run(0);
    if (b == nullptr) return;
    host_->premapped(-static_cast<std::ptrdiff_t>(b->granules));
    destroy_block(b);
  }
}

bool DevicePool::premap(std::size_t n) {
  std::vector<Chunk> chunks;
  n = host_->take_ready(n, &chunks);
  if (n == 0) return false;
  const std::size_t bytes = n * chunk_;
  CUdeviceptr va = 0;
  {
    MutexLock lock(mu_);
    if (take_range(bytes, &va) != CUDA_SUCCESS) {
      return_chunks(chunks);
      host_->landed(n);
      return false;
    }
  }
  // The driver calls run without the pool's lock: the range and the chunks are this thread's alone
  // until the run is published in the cache.
  const std::uint64_t started = trace::recording() ? trace::now() : 0;
  const CUresult r = vmm_.map(va, chunks, chunk_);
  MutexLock lock(mu_);
  if (r != CUDA_SUCCESS) {
    log::debug("device {}: premapping {} host chunks failed ({})", device_, n, static_cast<int>(r));
    ranges_.give_back(va, bytes);
    return_chunks(chunks);
    host_->landed(n);
    return false;
  }
  Block* b = make_block(va, std::move(chunks));
  fig_.stitched_maps.fetch_add(1, std::memory_order_relaxed);
  trace::record(trace::Kind::Map, device_, va, bytes, bytes, started);
  cache_block(b);
  host_->landed(n);  // a premapped run now, which allocations take from
  return true;
}

void DevicePool::premap_reserve() {
  while (host_->size() > host_->unmapped_target() &&
         premap(std::min(kRunChunks, host_->size() - host_->unmapped_target()))) {
  }
}

bool DevicePool::trim_premapped(std::size_t n) {
  // Idle: the largest runs go first (fewest descriptors to visit); their chunks go back to the
  // reserve, which gives what is above its share back to the system.
  MutexLock lock(mu_);
  Block* b = cache_.take_host_run(0, /*largest=*/true);
  if (b == nullptr) return false;
  host_->premapped(-static_cast<std::ptrdiff_t>(b->granules));
  if (b->granules > n) {
    // Keep the front of the run: only the tail is unmapped.
    const std::size_t keep = b->granules - n;
    b->host_chunks = keep;
    fig_.host_mapped.fetch_sub(n, std::memory_order_relaxed);
    shrink_block(b, n);  // caches the rest again
    return true;
  }
  destroy_block(b);
  return true;
}

bool DevicePool::upkeep_host() {
  if (!host_ || abandoned_ || process_exiting()) return false;
  bool did = host_->upkeep();
  const std::size_t target = host_->target();
  if (target == 0) return did;
  const std::size_t unmapped = host_->unmapped_target();
  const std::size_t premap_target = target > unmapped ? target - unmapped : 0;
  const std::size_t premapped = host_->premapped();
  const std::size_t loose = host_->size();
  if (premapped < premap_target && loose > unmapped) {
    did |= premap(std::min({kRunChunks, premap_target - premapped, loose - unmapped}));
  } else if (premapped > premap_target && host_->idle()) {
    did |= trim_premapped(std::min(kRunChunks, premapped - premap_target));
  }
  return did;
}

}  // namespace uvmpool::pool
