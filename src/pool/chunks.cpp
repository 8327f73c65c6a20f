// A device pool's physical chunks, address space and budget: set-up, growth, release, figures.
#include <algorithm>
#include <bit>

#include "config/log.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {

std::uint64_t next_buffer_id() {
  static std::atomic<std::uint64_t> next{(std::uint64_t{1} << 60) + 1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::size_t StreamKeyHash::operator()(const StreamKey& k) const {
  const auto a = reinterpret_cast<std::uintptr_t>(k.stream);
  const auto b = reinterpret_cast<std::uintptr_t>(k.context);
  return std::hash<std::uintptr_t>()(a * 31 + b) ^ std::hash<std::thread::id>()(k.thread);
}

DevicePool::DevicePool(const driver::Table& driver, int device, const PoolConfig& config, AddressMap& map)
    : d_(driver), device_(device), config_(config), map_(map), vmm_(driver, device) {}

DevicePool::~DevicePool() {
  if (abandoned_) return;
  std::lock_guard lock(mu_);
  for (Block* b : all_blocks_) {
    if (b->state.load() != kDead) {
      vmm_.unmap(b->base, b->chunks.size(), chunk_);
      vmm_.release_chunks(b->chunks);
    }
    delete b;
  }
  for (Slab* s : all_slabs_) {
    if (s->state.load() != kDead) {
      vmm_.unmap(s->base, 1, chunk_);
      vmm_.release_chunks({&s->chunk, 1});
    }
    delete s;
  }
  vmm_.release_chunks(free_chunks_);
  for (const Batch& b : batches_) d_.cuEventDestroy_v2(b.event);
  for (CUevent e : spare_events_) d_.cuEventDestroy_v2(e);
  for (auto [va, size] : reservations_) vmm_.free_reservation(va, size);
}

CUresult DevicePool::init() {
  int vmm = 0;
  if (d_.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_) != CUDA_SUCCESS ||
      vmm == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const std::size_t g = vmm_.granularity();
  if (g == 0 || !std::has_single_bit(g)) return CUDA_ERROR_NOT_SUPPORTED;
  chunk_ = std::bit_ceil(std::max(config_.chunk_size, g));
  chunk_shift_ = static_cast<unsigned>(std::countr_zero(chunk_));
  small_max_ = std::min({config_.small_max, kSmallLimit, chunk_ / 2});
  std::size_t total = 0;
  if (const CUresult r = d_.cuDeviceTotalMem_v2(&total, device_); r != CUDA_SUCCESS) return r;
  total_ = total;
  budget_ = std::min<std::uint64_t>(config_.device_limit.resolve(total_), total_);
  bins_ = std::make_unique<Bin[]>(kDirectBins + 1);
  classes_ = std::make_unique<SlabClass[]>(kSmallClasses);
  log::debug("device {}: chunk {} KiB, budget {} MiB of {} MiB, headroom {} MiB", device_, chunk_ >> 10,
             budget_ >> 20, total_ >> 20, config_.headroom >> 20);
  return CUDA_SUCCESS;
}

CUresult DevicePool::take_range(std::size_t bytes, CUdeviceptr* va) {
  if (auto got = ranges_.take(bytes)) {
    *va = *got;
    return CUDA_SUCCESS;
  }
  // A new region: room for several times the device's memory, so this happens once or twice. The
  // driver gives large reservations cheaply (16 TiB measured on H200); smaller ones if it refuses.
  std::size_t size = std::max<std::size_t>(bytes, std::bit_ceil(std::max<std::uint64_t>(total_, chunk_)) * 4);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr base = 0;
  for (; size >= bytes; size /= 2) {
    r = vmm_.reserve(&base, size, chunk_);
    if (r == CUDA_SUCCESS) break;
    if (size / 2 < bytes) break;
  }
  if (r != CUDA_SUCCESS) return r;
  if (!map_.add_region(base, size, chunk_shift_)) {
    vmm_.free_reservation(base, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  reservations_.push_back({base, size});
  ranges_.add(base, size);
  auto got = ranges_.take(bytes);
  *va = *got;
  return CUDA_SUCCESS;
}

std::uint64_t DevicePool::others_bytes() {
  // Memory used by anyone but the pool (the driver, pass-through calls, other processes), read from
  // the driver's own figure. Needs a context of this device to be current; unknown (0) otherwise.
  std::size_t free_b = 0, total_b = 0;
  CUdevice current = -1;
  if (d_.cuCtxGetDevice(&current) != CUDA_SUCCESS || current != device_) return 0;
  if (d_.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS) return 0;
  const std::uint64_t held = chunks_held_.load(std::memory_order_relaxed) * chunk_;
  const std::uint64_t used = total_b - free_b;
  return used > held ? used - held : 0;
}

bool DevicePool::budget_allows(std::size_t n) {
  const std::uint64_t want = static_cast<std::uint64_t>(n) * chunk_;
  const std::uint64_t held = chunks_held_.load(std::memory_order_relaxed) * chunk_;
  if (held + want > budget_) return false;
  std::size_t free_b = 0, total_b = 0;
  CUdevice current = -1;
  if (d_.cuCtxGetDevice(&current) == CUDA_SUCCESS && current == device_ &&
      d_.cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS) {
    const std::uint64_t used = total_b - free_b;
    const std::uint64_t others = used > held ? used - held : 0;
    if (held + others + want > budget_) return false;
    if (free_b < want + config_.headroom) return false;  // leave the headroom to cuBLAS, NCCL, the driver
  }
  return true;
}

CUresult DevicePool::grow(std::size_t n) {
  if (!budget_allows(n)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::vector<Handle> made(n);
  if (const CUresult r = vmm_.create_chunks(made, chunk_); r != CUDA_SUCCESS) return r;
  free_chunks_.insert(free_chunks_.end(), made.begin(), made.end());
  chunks_free_.fetch_add(n, std::memory_order_relaxed);
  created_.fetch_add(n, std::memory_order_relaxed);
  const std::uint64_t held = chunks_held_.fetch_add(n, std::memory_order_relaxed) + n;
  std::uint64_t peak = peak_held_.load(std::memory_order_relaxed);
  while (held * chunk_ > peak && !peak_held_.compare_exchange_weak(peak, held * chunk_)) {
  }
  return CUDA_SUCCESS;
}

CUresult DevicePool::take_chunks(std::size_t n, std::vector<Handle>* out) {
  // Idle memory first — cached mappings and empty slabs are taken apart before the pool grows — so
  // what the pool holds stays close to what the program uses; growth only covers the shortfall.
  if (free_chunks_.size() < n) evict_cached(n - free_chunks_.size());
  if (free_chunks_.size() < n) evict_empty_slabs();
  if (free_chunks_.size() < n) {
    if (const CUresult r = grow(n - free_chunks_.size()); r != CUDA_SUCCESS) return r;
  }
  out->assign(free_chunks_.end() - static_cast<std::ptrdiff_t>(n), free_chunks_.end());
  free_chunks_.resize(free_chunks_.size() - n);
  chunks_free_.fetch_sub(n, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

void DevicePool::release_free_chunks(std::size_t keep) {
  if (free_chunks_.size() <= keep) return;
  const std::size_t n = free_chunks_.size() - keep;
  vmm_.release_chunks({free_chunks_.data() + keep, n});
  free_chunks_.resize(keep);
  chunks_free_.fetch_sub(n, std::memory_order_relaxed);
  chunks_held_.fetch_sub(n, std::memory_order_relaxed);
  released_.fetch_add(n, std::memory_order_relaxed);
}

void DevicePool::release_idle(bool keep_chunks) {
  collect_pending(false);
  std::lock_guard lock(mu_);
  evict_cached(SIZE_MAX);
  evict_empty_slabs();
  if (!keep_chunks) release_free_chunks(0);
}

CUresult DevicePool::admit_external(std::size_t bytes) {
  std::lock_guard lock(mu_);
  const std::size_t n = (bytes + chunk_ - 1) / chunk_;
  const auto fits = [&] {
    const std::uint64_t held = chunks_held_.load(std::memory_order_relaxed) * chunk_;
    return held + others_bytes() + static_cast<std::uint64_t>(n) * chunk_ <= budget_;
  };
  if (fits()) return CUDA_SUCCESS;
  // Idle memory of the pool is given back to the driver to make room for the program's own.
  evict_cached(SIZE_MAX);
  evict_empty_slabs();
  release_free_chunks(0);
  if (fits()) return CUDA_SUCCESS;
  oom_.fetch_add(1, std::memory_order_relaxed);
  log::warn("device {}: cuMemCreate of {} MiB refused: it would exceed UVMPOOL_DEVICE_LIMIT ({} MiB)", device_,
            bytes >> 20, budget_ >> 20);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult DevicePool::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t dfree = 0, dtotal = 0;
  if (const CUresult r = d_.cuMemGetInfo_v2(&dfree, &dtotal); r != CUDA_SUCCESS) return r;
  const std::uint64_t held = chunks_held_.load(std::memory_order_relaxed) * chunk_;
  const std::uint64_t idle =
      (chunks_free_.load(std::memory_order_relaxed) + chunks_cached_.load(std::memory_order_relaxed)) * chunk_;
  const std::uint64_t in_use = held > idle ? held - idle : 0;
  const std::uint64_t used = dtotal - dfree;
  const std::uint64_t others = used > held ? used - held : 0;
  // Idle pool memory is reusable, so it counts as free; what others use counts against the budget;
  // the headroom is never the pool's to give. In whole chunks, so that allocating all of what this
  // answers succeeds.
  std::uint64_t left = budget_ > others + in_use ? budget_ - others - in_use : 0;
  const std::uint64_t growable = dfree > config_.headroom ? dfree - config_.headroom : 0;
  left = std::min<std::uint64_t>(left, growable + idle);
  left -= left % chunk_;
  if (free_bytes != nullptr) *free_bytes = left;
  if (total_bytes != nullptr) *total_bytes = budget_;
  return CUDA_SUCCESS;
}

DeviceStats DevicePool::stats() const {
  DeviceStats s;
  s.chunk_size = chunk_;
  s.chunks_held = chunks_held_.load(std::memory_order_relaxed);
  s.chunks_free = chunks_free_.load(std::memory_order_relaxed);
  s.chunks_cached = chunks_cached_.load(std::memory_order_relaxed);
  s.live_bytes = live_bytes_.load(std::memory_order_relaxed);
  s.live_allocations = live_allocations_.load(std::memory_order_relaxed);
  s.peak_held_bytes = peak_held_.load(std::memory_order_relaxed);
  s.peak_live_bytes = peak_live_.load(std::memory_order_relaxed);
  s.stitched_maps = stitched_maps_.load(std::memory_order_relaxed);
  s.cache_hits = cache_hits_.load(std::memory_order_relaxed);
  s.mappings_broken = broken_.load(std::memory_order_relaxed);
  s.chunks_created = created_.load(std::memory_order_relaxed);
  s.chunks_released = released_.load(std::memory_order_relaxed);
  s.budget = budget_;
  s.out_of_memory = oom_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace uvmpool::pool
