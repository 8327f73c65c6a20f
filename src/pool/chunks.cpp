// A device pool's physical chunks, address space and budget: set-up, growth, release, figures.
#include <algorithm>
#include <bit>
#include <chrono>

#include "config/limits.h"
#include "config/log.h"
#include "pool/device_pool.h"
#include "pool/placement.h"
#include "pool/stock.h"

namespace uvmpool::pool {

std::uint64_t next_buffer_id() {
  static std::atomic<std::uint64_t> next{(std::uint64_t{1} << 60) + 1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

DevicePool::DevicePool(const driver::Table& driver, int device, const PoolConfig& config, AddressMap& map,
                       HostTier* host, const std::atomic<DeviceWaits*>& waits, Captures& captures)
    : d_(driver), device_(device), config_(config), map_(map), device_waits_(waits), captures_(captures),
      vmm_(driver, device),
      counters_(config.counters), pending_(driver, device, waits), host_tier_(host) {}

DevicePool::~DevicePool() {
  if (abandoned_) {
    if (carve_range_) carve_range_->abandon();  // its destructor runs anyway: no driver call from it
    return;
  }
  MutexLock lock(mu_);
  carve_range_.reset();  // unmaps its slots; their pieces back to the free lists, released below
  for (Block* b : all_blocks_) {
    if (b->state.load() != kDead) {
      vmm_.unmap(b->base, b->chunks, chunk_);
      return_chunks(b->chunks);
    }
    delete b;
  }
  for (Slab* s : all_slabs_) {
    if (s->state.load() != kDead) {
      vmm_.unmap(s->base, {&s->chunk, 1}, chunk_);
      return_chunks({&s->chunk, 1});
    }
    delete s;
  }
  const FreePieces::All free = free_.take_all();
  vmm_.release_chunks(free.chunks);
  vmm_.release_chunks(free.extents);
  for (const Chunk& c : free.runs) vmm_.release_chunks({&c.handle, 1});
  host_.reset();  // releases the host chunks, those given back above included
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
  // At most kMaxChunkSize (options reject more; a PoolConfig made by hand is clamped): bit_ceil of
  // anything past 2^63 is undefined.
  chunk_ = std::bit_ceil(std::max(std::min<std::size_t>(config_.chunk_size, config::kMaxChunkSize), g));
  std::size_t host_granularity = 0;
  if (host_tier_ != nullptr) {
    // Host chunks map where device chunks do, so one chunk size must suit both.
    host_granularity = vmm_.init_host();
    if (host_granularity != 0 && std::has_single_bit(host_granularity)) {
      chunk_ = std::max(chunk_, host_granularity);
    } else {
      log::info("device {}: the driver offers no host-located VMM chunks; spilling is off", device_);
      host_granularity = 0;
    }
  }
  vmm_.init_export();  // after init_host: host chunks are exportable only at a HOST_NUMA location
  chunk_shift_ = static_cast<unsigned>(std::countr_zero(chunk_));
  // Extents: a power of two of at least two chunks (options reject other sizes; a PoolConfig made by
  // hand is rounded down), else off.
  const std::size_t extent = std::min<std::size_t>(config_.extent_size, config::kMaxChunkSize);
  extent_granules_ = extent >= 2 * chunk_ ? std::bit_floor(extent) / chunk_ : 0;
  {
    MutexLock lock(mu_);  // no other thread yet: for the analysis
    free_.set_extent_granules(extent_granules_);
  }
  small_max_ = std::min({config_.small_max, kSmallLimit, chunk_ / 2});
  // Carving needs extents (its slots) and is not for guard mode (every allocation its own mapping).
  carve_max_ = extent_granules_ != 0 && !config_.guard && config_.carve_max > small_max_ ? config_.carve_max : 0;
  std::size_t total = 0;
  if (const CUresult r = d_.cuDeviceTotalMem_v2(&total, device_); r != CUDA_SUCCESS) return r;
  total_ = total;
  budget_ = std::min<std::uint64_t>(config_.device_limit.resolve(total_), total_);
  if (host_granularity != 0) {
    host_ = std::make_unique<HostReserve>(vmm_, *host_tier_, chunk_, config_.host_reserve);
    host_tier_->add([this] { return upkeep_host(); });
  }
  cache_.init(chunk_, counters_);
  slabs_ = std::make_unique<SlabClasses>(fig_);
  log::debug("device {}: chunk {} KiB, extent {} MiB, budget {} MiB of {} MiB, headroom {} MiB", device_,
             chunk_ >> 10, (extent_granules_ * chunk_) >> 20, budget_ >> 20, total_ >> 20, config_.headroom >> 20);
  return CUDA_SUCCESS;
}

CUresult DevicePool::take_range(std::size_t bytes, CUdeviceptr* va) {
  if (auto got = ranges_.take(bytes)) {
    *va = *got;
    return CUDA_SUCCESS;
  }
  // A new region: room for several times the device's memory, so this happens once or twice. The
  // driver gives large reservations cheaply (16 TiB measured on H200); smaller ones if it refuses.
  std::size_t size = std::max<std::size_t>(bytes, sat_mul(std::bit_ceil(std::max<std::uint64_t>(total_, chunk_)), 4));
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
  fig_.address_space.fetch_add(size, std::memory_order_relaxed);
  ranges_.add(base, size);
  auto got = ranges_.take(bytes);
  *va = *got;
  return CUDA_SUCCESS;
}

std::uint64_t DevicePool::others_bytes(std::uint64_t* driver_free) {
  // Memory used by anyone but the pool (the contexts, pass-through calls, other processes), from the
  // driver's own figure, which it gives only to a thread with a context of this device current. A
  // thread without one (the tiering mover's, NCCL's) gets the figure last read so, and at least the
  // program's own cuMemCreate. Counting only the latter let the mover's promotions grow the pool past
  // the limit by the contexts' memory: on an H200 the pool held all of a 2679 MiB limit, the
  // context's 526 MiB beside it (docs/gpu-results.md, nineteenth session). Read again by any thread
  // with a context that grows the pool or asks cuMemGetInfo.
  if (driver_free != nullptr) *driver_free = UINT64_MAX;
  std::size_t free_b = 0, total_b = 0;
  CUdevice current = -1;
  if (d_.cuCtxGetDevice(&current) != CUDA_SUCCESS || current != device_ ||
      d_.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS)
    return std::max(fig_.others_seen.load(std::memory_order_relaxed), fig_.external_device.load(std::memory_order_relaxed));
  const std::uint64_t held = fig_.chunks_held.load(std::memory_order_relaxed) * chunk_;
  const std::uint64_t used = total_b - free_b;
  const std::uint64_t others = used > held ? used - held : 0;
  fig_.others_seen.store(others, std::memory_order_relaxed);
  if (driver_free != nullptr) *driver_free = free_b;
  return others;
}

std::size_t DevicePool::growable_chunks() {
  const std::uint64_t held = fig_.chunks_held.load(std::memory_order_relaxed) * chunk_;
  if (held >= budget_) return 0;
  // While spilling, the device was full a moment ago: trust that for a few milliseconds rather than
  // ask the driver on every allocation (its calls queue behind the reserve thread's pinning).
  const auto now = std::chrono::steady_clock::now();
  if (host_ && full_until_ > now && held >= full_at_held_) return 0;
  const std::size_t n = read_growable_chunks(held);
  if (host_ && n == 0) {
    full_until_ = now + std::chrono::milliseconds(20);
    full_at_held_ = held;
  }
  return n;
}

std::size_t DevicePool::read_growable_chunks(std::uint64_t held) {
  std::uint64_t room = budget_ - held;
  std::uint64_t driver_free = UINT64_MAX;
  const std::uint64_t others = others_bytes(&driver_free);
  room = room > others ? room - others : 0;
  // Leave the headroom to cuBLAS, NCCL, the driver (known where the driver's figure is).
  if (driver_free != UINT64_MAX) room = std::min<std::uint64_t>(room, driver_free > config_.headroom ? driver_free - config_.headroom : 0);
  return static_cast<std::size_t>(room / chunk_);
}

CUresult DevicePool::grow(std::size_t n) {
  // As many whole extents as n holds, chunks for the rest: each extent is one mapping call later
  // instead of extent_granules_. Where the driver refuses an extent, chunks stand in.
  std::size_t extents = extent_granules_ != 0 ? n / extent_granules_ : 0;
  if (extents != 0) {
    std::vector<Handle> made(extents);
    if (const CUresult r = vmm_.create_chunks(made, extent_granules_ * chunk_); r == CUDA_SUCCESS) {
      free_.add_extents(made);
      fig_.extents_held.fetch_add(extents, std::memory_order_relaxed);
      note_grown(extents * extent_granules_);
    } else {
      log::debug("device {}: {} extents refused ({}); chunks instead", device_, extents, static_cast<int>(r));
      extents = 0;
    }
  }
  const std::size_t singles = n - extents * extent_granules_;
  if (singles == 0) return CUDA_SUCCESS;
  std::vector<Handle> made(singles);
  if (const CUresult r = vmm_.create_chunks(made, chunk_); r != CUDA_SUCCESS) return r;
  free_.add_chunks(made);
  note_grown(singles);
  return CUDA_SUCCESS;
}

void DevicePool::note_grown(std::size_t n) {
  fig_.chunks_free.fetch_add(n, std::memory_order_relaxed);
  fig_.created.fetch_add(n, std::memory_order_relaxed);
  const std::uint64_t held = fig_.chunks_held.fetch_add(n, std::memory_order_relaxed) + n;
  std::uint64_t peak = fig_.peak_held.load(std::memory_order_relaxed);
  while (held * chunk_ > peak && !fig_.peak_held.compare_exchange_weak(peak, held * chunk_)) {
  }
  // Half the budget used: spilling may be near, so have host chunks pinned before it comes.
  if (host_ && held * chunk_ * 2 >= budget_) host_->arm();
}

std::size_t DevicePool::pull_device_pieces(std::size_t n, std::vector<Chunk>* out, bool runs) {
  // Whole extents while they fit, chunks for the rest. Free memory that holds too few chunks for the
  // rest (the tail of a request, a slab) has idle extents or runs to spare (placement made n granules
  // free): those are given back to the driver and made again as chunks, one at a time, rather
  // than the pool growing past what the program uses.
  const std::size_t extents = extent_granules_ != 0 ? std::min(n / extent_granules_, free_.extents()) : 0;
  std::size_t singles = n - extents * extent_granules_;
  std::vector<Chunk> taken_runs;
  std::size_t run_granules = 0;
  if (runs) {
    // Whole extents too where no free one is left (the device's free memory, after a demotion, is
    // the chunks the demoted range was made of): made of free chunks the same way.
    for (std::size_t g = extent_granules_; g >= 2 && singles >= 2; g /= 2) {
      Chunk run;
      while (singles >= g && take_run(g, &run)) {
        taken_runs.push_back(run);
        singles -= g;
        run_granules += g;
      }
    }
  }
  while (free_.chunks() < singles && free_.runs() != 0 && split_free_run()) {
  }
  while (free_.chunks() < singles && free_.extents() > extents && split_free_extent()) {
  }
  for (std::size_t i = 0; i < extents; ++i) {
    out->push_back({free_.pop_extent(), Tier::Device, static_cast<std::uint32_t>(extent_granules_)});
  }
  out->insert(out->end(), taken_runs.begin(), taken_runs.end());
  const std::size_t got = std::min(singles, free_.chunks());
  free_.pop_chunks(got, out);
  const std::size_t pulled = extents * extent_granules_ + run_granules + got;
  fig_.chunks_free.fetch_sub(pulled, std::memory_order_relaxed);
  return pulled;
}

bool DevicePool::take_run(std::size_t granules, Chunk* out) {
  if (const std::optional<Chunk> run = free_.take_run(granules)) {
    *out = *run;
    return true;
  }
  if (free_.chunks() < granules) return false;
  // Given back before the run is made, so the pool never holds more than its budget; a chunk costs
  // about 9 us to release and a run about as much to make (H200), once: the run stays the pool's.
  vmm_.release_chunks(free_.pop_chunk_handles(granules));
  fig_.chunks_free.fetch_sub(granules, std::memory_order_relaxed);
  fig_.chunks_held.fetch_sub(granules, std::memory_order_relaxed);
  fig_.released.fetch_add(granules, std::memory_order_relaxed);
  Handle h = 0;
  if (const CUresult r = vmm_.create_chunks({&h, 1}, granules * chunk_); r != CUDA_SUCCESS) {
    log::debug("device {}: a run of {} chunks refused ({}); chunks again", device_, granules, static_cast<int>(r));
    std::size_t made = 0;
    for (; made < granules; ++made) {
      Handle c = 0;
      if (vmm_.create_chunks({&c, 1}, chunk_) != CUDA_SUCCESS) break;
      free_.add_chunks({&c, 1});
    }
    if (made != 0) note_grown(made);
    return false;
  }
  note_grown(granules);  // free until pull_device_pieces counts it pulled
  fig_.extents_held.fetch_add(1, std::memory_order_relaxed);
  *out = Chunk{h, Tier::Device, static_cast<std::uint32_t>(granules)};
  return true;
}

bool DevicePool::split_free_run() {
  const Chunk run = free_.pop_run();
  return split_free_piece(run.handle, run.granules);
}

bool DevicePool::split_free_extent() { return split_free_piece(free_.pop_extent(), extent_granules_); }

bool DevicePool::split_free_piece(Handle handle, std::size_t granules) {
  vmm_.release_chunks({&handle, 1});
  fig_.extents_held.fetch_sub(1, std::memory_order_relaxed);
  fig_.chunks_free.fetch_sub(granules, std::memory_order_relaxed);
  fig_.chunks_held.fetch_sub(granules, std::memory_order_relaxed);
  fig_.released.fetch_add(granules, std::memory_order_relaxed);
  // One at a time, so that what was made stays the pool's if the driver refuses the rest (another
  // process took the memory in between): the pool then holds that much less.
  std::size_t made = 0;
  for (; made < granules; ++made) {
    Handle h = 0;
    if (const CUresult r = vmm_.create_chunks({&h, 1}, chunk_); r != CUDA_SUCCESS) {
      log::warn("device {}: a free piece given back to be made again as chunks: {} of {} made ({})", device_, made,
                granules, static_cast<int>(r));
      break;
    }
    free_.add_chunks({&h, 1});
  }
  if (made != 0) note_grown(made);
  return made == granules;
}

CUresult DevicePool::take_chunks(std::size_t n, std::vector<Chunk>* out) {
  PoolStock stock(*this, out);
  return placement::place(stock, {placement::Purpose::Pieces, n, host_ != nullptr}).refused ? CUDA_ERROR_OUT_OF_MEMORY
                                                                                           : CUDA_SUCCESS;
}

void DevicePool::return_chunks(std::span<const Chunk> chunks) {
  std::size_t device = 0;
  for (const Chunk& c : chunks) {
    if (c.tier == Tier::Host) {
      host_->give_back({&c, 1});
      continue;
    }
    if (extent_granules_ != 0 && c.granules > extent_granules_) {
      // A carved group's handle (carved_range.h, "Groups"): no shape the free pieces keep. Given back to
      // the driver; the budget makes what is needed next.
      vmm_.release_chunks({&c.handle, 1});
      fig_.extents_held.fetch_sub(1, std::memory_order_relaxed);
      fig_.chunks_held.fetch_sub(c.granules, std::memory_order_relaxed);
      fig_.released.fetch_add(c.granules, std::memory_order_relaxed);
      continue;
    }
    free_.add(c);
    device += c.granules;
  }
  fig_.chunks_free.fetch_add(device, std::memory_order_relaxed);
  check_free_pieces();
}

void DevicePool::release_free_chunks() {
  const std::size_t n = free_granules();
  if (n == 0) return;
  const FreePieces::All free = free_.take_all();
  vmm_.release_chunks(free.chunks);
  vmm_.release_chunks(free.extents);
  for (const Chunk& c : free.runs) vmm_.release_chunks({&c.handle, 1});
  fig_.extents_held.fetch_sub(free.extents.size() + free.runs.size(), std::memory_order_relaxed);
  fig_.chunks_free.fetch_sub(n, std::memory_order_relaxed);
  fig_.chunks_held.fetch_sub(n, std::memory_order_relaxed);
  fig_.released.fetch_add(n, std::memory_order_relaxed);
}

void DevicePool::release_idle(bool keep_chunks) {
  // The reserve's thread, mid-refill, would otherwise map what it pinned after the release.
  if (host_ && !keep_chunks) host_->disarm();
  collect_pending(false);
  MutexLock lock(mu_);
  std::vector<Chunk> none;
  PoolStock stock(*this, &none);
  placement::reclaim_all(stock);
  if (!keep_chunks) {
    release_free_chunks();
    if (host_) host_->drain();
  }
}

CUresult DevicePool::fill_host_reserve(std::size_t bytes) {
  if (!host_) return CUDA_ERROR_NOT_SUPPORTED;
  if (const CUresult r = host_->fill(div_ceil(bytes, chunk_)); r != CUDA_SUCCESS) return r;
  premap_reserve();  // as the thread would
  return CUDA_SUCCESS;
}

void DevicePool::abandon() {
  abandoned_ = true;
  if (host_) host_->abandon();
}

CUresult DevicePool::admit_external(std::size_t bytes, Tier* tier) {
  MutexLock lock(mu_);
  const std::uint64_t want = sat_mul(div_ceil(bytes, chunk_), chunk_);
  const auto fits = [&] {
    // The budget alone, not the headroom: this is the program's own memory, as a cuMemAlloc would be.
    const std::uint64_t held = fig_.chunks_held.load(std::memory_order_relaxed) * chunk_;
    return held + others_bytes() + want <= budget_;
  };
  bool ok = fits();
  std::vector<Chunk> none;
  PoolStock stock(*this, &none);
  if (!ok) {
    // Idle memory of the pool is given back to the driver to make room for the program's own.
    placement::reclaim_all(stock, placement::kDeviceSources);
    release_free_chunks();
    ok = fits();
  }
  if (ok) {
    fig_.external_device.fetch_add(bytes, std::memory_order_relaxed);
    *tier = Tier::Device;
    return CUDA_SUCCESS;
  }
  bool charged = host_ && host_tier_->charge(bytes);
  if (host_ && !charged) {
    // The pool's own idle host memory makes way for the program's handle.
    stock.reclaim(placement::Idle::AllHostMappings, SIZE_MAX / 2);
    host_->drain();
    charged = host_tier_->charge(bytes);
  }
  if (charged) {
    fig_.external_host.fetch_add(bytes, std::memory_order_relaxed);
    fig_.spilled.fetch_add(1, std::memory_order_relaxed);
    *tier = Tier::Host;
    return CUDA_SUCCESS;
  }
  fig_.oom.fetch_add(1, std::memory_order_relaxed);
  log::warn("device {}: cuMemCreate of {} MiB refused: it would exceed UVMPOOL_DEVICE_LIMIT ({} MiB){}", device_,
            bytes >> 20, budget_ >> 20,
            host_ ? fmt::format(" and UVMPOOL_HOST_LIMIT ({} of {} MiB pinned)", host_tier_->charged() >> 20,
                                host_tier_->limit() >> 20)
                  : std::string(" and spilling is off (UVMPOOL_SPILL)"));
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void DevicePool::external_released(std::size_t bytes, Tier tier) {
  if (tier == Tier::Device) {
    fig_.external_device.fetch_sub(bytes, std::memory_order_relaxed);
  } else {
    fig_.external_host.fetch_sub(bytes, std::memory_order_relaxed);
    host_tier_->uncharge(bytes);
  }
}

CUresult DevicePool::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t dfree = 0, dtotal = 0;
  if (const CUresult r = d_.cuMemGetInfo_v2(&dfree, &dtotal); r != CUDA_SUCCESS) return r;
  const std::uint64_t held = fig_.chunks_held.load(std::memory_order_relaxed) * chunk_;
  const std::uint64_t idle =
      (fig_.chunks_free.load(std::memory_order_relaxed) + fig_.chunks_cached.load(std::memory_order_relaxed) +
       fig_.carved_idle.load(std::memory_order_relaxed)) *
      chunk_;
  const std::uint64_t in_use = held > idle ? held - idle : 0;
  const std::uint64_t used = dtotal - dfree;
  const std::uint64_t others = used > held ? used - held : 0;
  fig_.others_seen.store(others, std::memory_order_relaxed);  // for threads that cannot ask (others_bytes)
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
  s.extent_size = extent_granules_ * chunk_;
  s.extents_held = fig_.extents_held.load(std::memory_order_relaxed);
  s.chunks_held = fig_.chunks_held.load(std::memory_order_relaxed);
  s.chunks_free = fig_.chunks_free.load(std::memory_order_relaxed);
  s.chunks_cached = fig_.chunks_cached.load(std::memory_order_relaxed);
  s.carved_mapped_bytes = fig_.carved_mapped.load(std::memory_order_relaxed);
  s.carved_live_bytes = fig_.carved_live.load(std::memory_order_relaxed);
  s.carved_idle_bytes = fig_.carved_idle.load(std::memory_order_relaxed) * chunk_;
  s.held_bytes = s.chunks_held * chunk_;
  s.address_space_bytes = fig_.address_space.load(std::memory_order_relaxed);
  s.live_bytes = fig_.live_bytes.load(std::memory_order_relaxed);
  // Allocations and frees are counted where each path counts them cheapest: the bins and slab
  // classes under their own locks, the rest in the pool-wide counters.
  auto load = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.cache_hits = load(fig_.cache_hits);
  s.repeat_places_kept = load(fig_.repeat_places_kept);
  s.repeat_places_missed = load(fig_.repeat_places_missed);
  s.frees = load(fig_.frees) + load(fig_.carved_frees);
  for (int i = 0; i < kSizeBuckets; ++i) {
    s.allocations_by_size[i] = load(fig_.allocations[i]) + load(fig_.carved_allocations[i]);
  }
  cache_.add_counts(s);
  if (slabs_) slabs_->add_counts(s);
  for (const std::uint64_t n : s.allocations_by_size) s.allocations += n;
  // Read apart, a free may be counted before its allocation's bucket: never show fewer than none.
  s.live_allocations = s.allocations > s.frees ? s.allocations - s.frees : 0;
  s.peak_held_bytes = fig_.peak_held.load(std::memory_order_relaxed);
  s.peak_live_bytes = fig_.peak_live.load(std::memory_order_relaxed);
  s.peak_live_device_bytes = fig_.peak_live_device.load(std::memory_order_relaxed);
  s.peak_live_host_bytes = fig_.peak_live_host.load(std::memory_order_relaxed);
  s.stitched_maps = fig_.stitched_maps.load(std::memory_order_relaxed);
  s.mappings_broken = fig_.broken.load(std::memory_order_relaxed);
  s.mappings_carved = fig_.cut_or_joined.load(std::memory_order_relaxed);
  s.chunks_created = fig_.created.load(std::memory_order_relaxed);
  s.chunks_released = fig_.released.load(std::memory_order_relaxed);
  s.budget = budget_;
  s.out_of_memory = fig_.oom.load(std::memory_order_relaxed);
  if (host_) {
    s.host_chunks_held = host_->held();
    s.host_held_bytes = s.host_chunks_held * chunk_;
    s.host_chunks_reserve = host_->size() + host_->extent_granules();  // host extents stocked for moves too
    s.host_chunks_premapped = host_->premapped();
    s.host_chunks_cached = fig_.host_cached.load(std::memory_order_relaxed);
    s.host_chunks_mapped = fig_.host_mapped.load(std::memory_order_relaxed);
    s.peak_host_held_bytes = host_->peak_held() * chunk_;
    s.host_chunks_pinned_inline = host_->pinned_inline();
    s.host_limit = host_tier_->limit();
  }
  s.live_host_bytes = fig_.live_host_bytes.load(std::memory_order_relaxed);
  s.spilled_allocations = fig_.spilled.load(std::memory_order_relaxed);
  s.external_device_bytes = fig_.external_device.load(std::memory_order_relaxed);
  s.external_host_bytes = fig_.external_host.load(std::memory_order_relaxed);
  s.moved_to_device_bytes = fig_.moved_to_device.load(std::memory_order_relaxed);
  s.moved_to_host_bytes = fig_.moved_to_host.load(std::memory_order_relaxed);
  s.moved_live_to_device_bytes = fig_.moved_live_to_device.load(std::memory_order_relaxed);
  s.moved_live_to_host_bytes = fig_.moved_live_to_host.load(std::memory_order_relaxed);
  s.moved_uncopied_bytes = fig_.moved_uncopied.load(std::memory_order_relaxed);
  s.moves = fig_.moves.load(std::memory_order_relaxed);
  s.moves_failed = fig_.moves_failed.load(std::memory_order_relaxed);
  s.moves_in_flight = fig_.moves_in_flight.load(std::memory_order_relaxed);
  s.move_mappings_unmapped = fig_.move_unmapped.load(std::memory_order_relaxed);
  s.move_mappings_mapped = fig_.move_mapped.load(std::memory_order_relaxed);
  s.move_commit_us = fig_.move_commit_ns.load(std::memory_order_relaxed) / 1000;
  s.move_remap_us = fig_.move_remap_ns.load(std::memory_order_relaxed) / 1000;
  const auto us = [](const std::atomic<std::uint64_t>& ns) { return ns.load(std::memory_order_relaxed) / 1000; };
  s.move_unmap_device_us = us(fig_.move_unmap_ns[0]);
  s.move_unmap_host_us = us(fig_.move_unmap_ns[1]);
  s.move_map_device_us = us(fig_.move_map_ns[0]);
  s.move_map_host_us = us(fig_.move_map_ns[1]);
  s.move_set_access_device_us = us(fig_.move_access_ns[0]);
  s.move_set_access_host_us = us(fig_.move_access_ns[1]);
  return s;
}

}  // namespace uvmpool::pool
