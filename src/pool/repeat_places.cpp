#include "pool/repeat_places.h"

namespace uvmpool::pool {

CUdeviceptr RepeatPlaces::last_place(std::size_t bytes) const {
  MutexLock lock(mu_);
  const auto n = live_.find(bytes);
  const auto it = last_.find(Point{bytes, n == live_.end() ? 0 : n->second});
  return it == last_.end() ? 0 : it->second;
}

void RepeatPlaces::placed(std::size_t bytes, CUdeviceptr p) {
  MutexLock lock(mu_);
  const auto [at, fresh] = live_at_.try_emplace(p, bytes);
  if (!fresh) return;  // placed twice without a free between: a caller's slip, counted once
  std::size_t& live = live_[bytes];
  if (last_.size() >= kMostPoints) last_.clear();
  last_[Point{bytes, live}] = p;
  ++live;
  tracked_.store(live_at_.size(), std::memory_order_relaxed);
}

void RepeatPlaces::freed(CUdeviceptr p) {
  if (tracked_.load(std::memory_order_relaxed) == 0) return;
  MutexLock lock(mu_);
  const auto at = live_at_.find(p);
  if (at == live_at_.end()) return;
  const auto n = live_.find(at->second);
  if (n != live_.end() && --n->second == 0) live_.erase(n);
  live_at_.erase(at);
  tracked_.store(live_at_.size(), std::memory_order_relaxed);
}

std::size_t RepeatPlaces::points() const {
  MutexLock lock(mu_);
  return last_.size();
}

}  // namespace uvmpool::pool
