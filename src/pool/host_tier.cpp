#include "pool/host_tier.h"

#include <algorithm>

#include "config/log.h"
#include "config/size_math.h"
#include "driver/capture_mode.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {

// kBatch: big enough that an empty reserve refills in few steps, small enough (about 11 ms of pinning
// at 2 MiB) that the thread notices exit quickly.

bool HostTier::charge(std::uint64_t bytes) {
  std::uint64_t now = charged_.load(std::memory_order_relaxed);
  do {
    if (!fits_within(now, bytes, limit_)) return false;
  } while (!charged_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

void HostTier::add(std::function<bool()> upkeep) {
  MutexLock lock(mu_);
  upkeeps_.push_back(std::move(upkeep));
}

void HostTier::wake() {
  MutexLock lock(mu_);
  if (stopping_ || abandoned_ || process_exiting()) return;
  woken_ = true;
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

void HostTier::stop() {
  std::thread thread;
  {
    MutexLock lock(mu_);
    if (abandoned_) return;
    stopping_ = true;
    thread.swap(thread_);
  }
  cv_.notify_all();
  if (thread.joinable()) thread.join();
}

void HostTier::run() {
  driver::relax_capture_mode(d_);  // its pinning must not spoil a program's graph capture
  UniqueMutexLock lock(mu_);
  while (!stopping_) {
    // Woken for a spill, or once a second to give back what has been idle.
    if (!woken_ && !stopping_) cv_.wait_for(lock.native(), std::chrono::seconds(1));
    woken_ = false;
    const std::vector<std::function<bool()>> upkeeps = upkeeps_;
    lock.unlock();
    for (bool more = true; more;) {
      more = false;
      for (const auto& upkeep : upkeeps) {
        if (process_exiting()) break;
        more |= upkeep();
      }
      MutexLock check(mu_);
      if (stopping_) break;
    }
    lock.lock();
  }
}

HostReserve::HostReserve(const Vmm& vmm, HostTier& tier, std::size_t chunk, std::uint64_t base_bytes)
    : vmm_(vmm),
      tier_(tier),
      chunk_(chunk),
      base_(static_cast<std::size_t>(div_ceil(base_bytes, chunk))),
      cap_(std::max<std::size_t>(base_, (std::uint64_t{4} << 30) / chunk)) {}

HostReserve::~HostReserve() {
  if (abandoned_) return;
  MutexLock lock(mu_);
  unpin(chunks_);
  chunks_.clear();
  unpin_extents(extents_);
  extents_.clear();
}

CUresult HostReserve::pin(std::size_t n, std::vector<Handle>* out) {
  if (n == 0) return CUDA_SUCCESS;
  const std::uint64_t bytes = sat_mul(n, chunk_);  // past the limit whenever it would wrap
  if (!tier_.charge(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::vector<Handle> made(n);
  if (const CUresult r = vmm_.create_chunks(made, chunk_, Tier::Host); r != CUDA_SUCCESS) {
    tier_.uncharge(bytes);
    log::debug("device {}: pinning {} host chunks failed ({})", vmm_.device(), n, static_cast<int>(r));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  out->insert(out->end(), made.begin(), made.end());
  note_pinned(n);
  return CUDA_SUCCESS;
}

void HostReserve::note_pinned(std::uint64_t granules) {
  const std::uint64_t held = held_.fetch_add(granules, std::memory_order_relaxed) + granules;
  std::uint64_t peak = peak_held_.load(std::memory_order_relaxed);
  while (held > peak && !peak_held_.compare_exchange_weak(peak, held, std::memory_order_relaxed)) {
  }
}

void HostReserve::unpin_extents(std::span<const Chunk> extents) {
  std::size_t granules = 0;
  for (const Chunk& c : extents) {
    vmm_.release_chunks({&c.handle, 1});
    granules += c.granules;
  }
  held_.fetch_sub(granules, std::memory_order_relaxed);
  tier_.uncharge(static_cast<std::uint64_t>(granules) * chunk_);
}

bool HostReserve::release_extents() {
  std::vector<Chunk> extents;
  {
    MutexLock lock(mu_);
    extents.swap(extents_);
    extent_granules_.store(0, std::memory_order_relaxed);
  }
  unpin_extents(extents);
  return !extents.empty();
}

void HostReserve::unpin(std::span<const Handle> chunks) {
  if (chunks.empty()) return;
  vmm_.release_chunks(chunks);
  held_.fetch_sub(chunks.size(), std::memory_order_relaxed);
  tier_.uncharge(static_cast<std::uint64_t>(chunks.size()) * chunk_);
}

CUresult HostReserve::take(std::size_t n, std::vector<Chunk>* out) {
  std::vector<Handle> got;
  bool refill = false;
  {
    MutexLock lock(mu_);
    const std::size_t from_reserve = std::min(n, chunks_.size());
    got.assign(chunks_.end() - static_cast<std::ptrdiff_t>(from_reserve), chunks_.end());
    chunks_.resize(chunks_.size() - from_reserve);
    last_take_ = Clock::now();
    grow_target_locked(n);
    const std::size_t ready = chunks_.size() + premapped();
    refill = ready < target_ || chunks_.size() < unmapped_target_locked();
    size_.store(chunks_.size(), std::memory_order_relaxed);
  }
  if (got.size() < n) {
    // The reserve is empty: pin what is missing inline, all in one go; the thread pins the reserve
    // back up (the caller waits only for its own memory).
    const std::size_t short_by = n - got.size();
    std::vector<Handle> pinned;
    if (pin(short_by, &pinned) == CUDA_SUCCESS) {
      inline_.fetch_add(pinned.size(), std::memory_order_relaxed);
      got.insert(got.end(), pinned.begin(), pinned.end());
    } else if (std::vector<Handle> again; release_extents() && pin(short_by, &again) == CUDA_SUCCESS) {
      // At the host limit with host extents stocked for moves: a spill comes first, so they go.
      inline_.fetch_add(again.size(), std::memory_order_relaxed);
      got.insert(got.end(), again.begin(), again.end());
    } else {
      // At the host limit: the thread may just have pinned what is missing (it was counted against
      // the limit while in flight), so look once more before giving up.
      MutexLock lock(mu_);
      if (chunks_.size() + got.size() < n) {
        chunks_.insert(chunks_.end(), got.begin(), got.end());
        size_.store(chunks_.size(), std::memory_order_relaxed);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      const std::size_t more = n - got.size();
      got.insert(got.end(), chunks_.end() - static_cast<std::ptrdiff_t>(more), chunks_.end());
      chunks_.resize(chunks_.size() - more);
      size_.store(chunks_.size(), std::memory_order_relaxed);
    }
  }
  for (Handle h : got) out->push_back(Chunk{h, Tier::Host});
  if (refill) tier_.wake();
  return CUDA_SUCCESS;
}

std::size_t HostReserve::take_ready(std::size_t n, std::vector<Chunk>* out) {
  MutexLock lock(mu_);
  if (holds_ != 0) return 0;
  const std::size_t k = std::min(n, chunks_.size());
  for (std::size_t i = chunks_.size() - k; i < chunks_.size(); ++i) out->push_back(Chunk{chunks_[i], Tier::Host});
  chunks_.resize(chunks_.size() - k);
  size_.store(chunks_.size(), std::memory_order_relaxed);
  in_flight_ += k;  // until the caller says landed(k)
  return k;
}

void HostReserve::landed(std::size_t n) {
  MutexLock lock(mu_);
  land_locked(n);
}

void HostReserve::land_locked(std::size_t n) {
  if (n == 0) return;
  landings_.fetch_add(1, std::memory_order_release);
  in_flight_ -= std::min(n, in_flight_);
  if (in_flight_ == 0) landed_cv_.notify_all();
}

void HostReserve::begin_hold() {
  UniqueMutexLock lock(mu_);
  ++holds_;
  while (in_flight_ != 0) landed_cv_.wait(lock.native());
}

void HostReserve::end_hold() {
  {
    MutexLock lock(mu_);
    if (--holds_ != 0) return;
  }
  tier_.wake();  // what upkeep skipped meanwhile
}

void HostReserve::note_take(std::size_t n) {
  bool refill = false;
  {
    MutexLock lock(mu_);
    last_take_ = Clock::now();
    grow_target_locked(n);
    refill = chunks_.size() + premapped() < target_;
  }
  if (refill) tier_.wake();
}

void HostReserve::grow_target_locked(std::size_t n) {
  // Room for two spills as large as this one while the thread pins more: the reserve covers bursts,
  // not the whole spill, so what it keeps pinned beyond use stays bounded (and falls back to the
  // base once spills stop).
  if (base_ == 0) return;  // UVMPOOL_HOST_RESERVE=0: no pinning ahead, every spill pins inline
  target_ = std::min(cap_, std::max({target_, base_, 2 * n}));
}

std::size_t HostReserve::unmapped_target_locked() const {
  // A quarter stays unmapped: the allocation that straddles the device limit, and slabs, need loose
  // chunks; the rest is premapped for allocations that lie wholly in host memory.
  return std::min(target_, std::max(target_ / 4, std::min(kBatch, target_)));
}

std::size_t HostReserve::unmapped_target() const {
  MutexLock lock(mu_);
  return unmapped_target_locked();
}

std::size_t HostReserve::target() const {
  MutexLock lock(mu_);
  return target_;
}

bool HostReserve::idle() const {
  MutexLock lock(mu_);
  return target_ != 0 && Clock::now() - last_take_ > tier_.idle();
}

std::size_t HostReserve::take_extents(std::size_t count, std::uint32_t granules, std::vector<Chunk>* out) {
  std::size_t taken = 0;
  {
    MutexLock lock(mu_);
    last_take_ = Clock::now();
    for (auto it = extents_.end(); taken < count && it != extents_.begin();) {
      if ((--it)->granules != granules) continue;
      out->push_back(*it);
      it = extents_.erase(it);
      ++taken;
    }
    extent_granules_.fetch_sub(taken * granules, std::memory_order_relaxed);
  }
  // The rest pinned now, one handle each, against the host limit like any host memory.
  const std::uint64_t bytes = static_cast<std::uint64_t>(granules) * chunk_;
  for (; taken < count; ++taken) {
    if (!tier_.charge(bytes)) break;
    Handle h = 0;
    if (const CUresult r = vmm_.create_chunks({&h, 1}, bytes, Tier::Host); r != CUDA_SUCCESS) {
      tier_.uncharge(bytes);
      log::debug("device {}: pinning a host extent of {} chunks failed ({})", vmm_.device(), granules, static_cast<int>(r));
      break;
    }
    out->push_back(Chunk{h, Tier::Host, granules});
    inline_.fetch_add(granules, std::memory_order_relaxed);
    note_pinned(granules);
  }
  return taken;
}

void HostReserve::give_back(std::span<const Chunk> chunks) {
  MutexLock lock(mu_);
  for (const Chunk& c : chunks) {
    if (c.granules == 1) {
      chunks_.push_back(c.handle);
    } else {
      extents_.push_back(c);
      extent_granules_.fetch_add(c.granules, std::memory_order_relaxed);
    }
  }
  size_.store(chunks_.size(), std::memory_order_relaxed);
}

CUresult HostReserve::fill(std::size_t chunks) {
  std::size_t have = 0;
  {
    MutexLock lock(mu_);
    have = chunks_.size();
    if (target_ < chunks) target_ = std::min(std::max(chunks, base_), std::max(cap_, chunks));
    last_take_ = Clock::now();
  }
  if (have >= chunks) return CUDA_SUCCESS;
  std::vector<Handle> pinned;
  if (const CUresult r = pin(chunks - have, &pinned); r != CUDA_SUCCESS) return r;
  MutexLock lock(mu_);
  chunks_.insert(chunks_.end(), pinned.begin(), pinned.end());
  size_.store(chunks_.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

void HostReserve::arm() {
  {
    MutexLock lock(mu_);
    if (target_ != 0 || base_ == 0) return;
    target_ = base_;
    last_take_ = Clock::now();
  }
  tier_.wake();
}

void HostReserve::disarm() {
  UniqueMutexLock lock(mu_);
  target_ = 0;
  while (in_flight_ != 0) landed_cv_.wait(lock.native());
}

void HostReserve::drain() {
  std::vector<Handle> all;
  {
    MutexLock lock(mu_);
    all.swap(chunks_);
    size_.store(0, std::memory_order_relaxed);
  }
  unpin(all);
  release_extents();
}

bool HostReserve::upkeep() {
  std::size_t to_pin = 0;
  std::vector<Handle> to_release;
  std::vector<Chunk> extents_to_release;
  {
    MutexLock lock(mu_);
    if (abandoned_ || holds_ != 0) return false;
    // Extents are kept only while moves cycle them: once idle they all go back.
    if (!extents_.empty() && Clock::now() - last_take_ > tier_.idle()) {
      const std::size_t n = std::min(kBatch, extents_.size());
      extents_to_release.assign(extents_.end() - static_cast<std::ptrdiff_t>(n), extents_.end());
      extents_.resize(extents_.size() - n);
      std::size_t granules = 0;
      for (const Chunk& c : extents_to_release) granules += c.granules;
      extent_granules_.fetch_sub(granules, std::memory_order_relaxed);
      in_flight_ += n;  // still charged to the host limit until unpinned
    }
  }
  if (!extents_to_release.empty()) {
    unpin_extents(extents_to_release);
    MutexLock lock(mu_);
    land_locked(extents_to_release.size());
    return true;
  }
  {
    MutexLock lock(mu_);
    if (target_ == 0 || abandoned_ || holds_ != 0) return false;
    const bool idle = Clock::now() - last_take_ > tier_.idle();
    if (idle) target_ = base_;
    const std::size_t ready = chunks_.size() + premapped();
    const std::size_t unmapped_target = unmapped_target_locked();
    if (ready < target_ || chunks_.size() < unmapped_target) {
      to_pin = std::min(kBatch, std::max(target_ - std::min(ready, target_), unmapped_target - std::min(chunks_.size(), unmapped_target)));
      in_flight_ += to_pin;  // charged by pin() before the chunks exist: see Hold
    } else if (idle && ready > target_ && chunks_.size() > unmapped_target) {
      const std::size_t n = std::min({kBatch, ready - target_, chunks_.size() - unmapped_target});
      to_release.assign(chunks_.end() - static_cast<std::ptrdiff_t>(n), chunks_.end());
      chunks_.resize(chunks_.size() - n);
      size_.store(chunks_.size(), std::memory_order_relaxed);
      in_flight_ += n;  // still charged to the host limit until unpinned
    }
  }
  if (!to_release.empty()) {
    unpin(to_release);
    MutexLock lock(mu_);
    land_locked(to_release.size());
    return true;
  }
  if (to_pin == 0) return false;
  std::vector<Handle> pinned;
  const bool ok = pin(to_pin, &pinned) == CUDA_SUCCESS;
  MutexLock lock(mu_);
  if (ok) {
    chunks_.insert(chunks_.end(), pinned.begin(), pinned.end());
    size_.store(chunks_.size(), std::memory_order_relaxed);
  } else {
    // The host limit (or the system) says no: stop aiming higher than what the reserve now holds.
    target_ = std::max<std::size_t>(chunks_.size() + premapped(), 1);
  }
  land_locked(to_pin);
  return ok;
}

}  // namespace uvmpool::pool
