#include "pool/repeat_places.h"

#include <algorithm>

namespace uvmpool::pool {

std::size_t RepeatPlaces::live_of(std::size_t bytes) const {
  const auto n = live_.find(bytes);
  return n == live_.end() ? 0 : n->second;
}

RepeatPlaces::Point RepeatPlaces::with_context(std::size_t bytes, std::size_t live) const {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::size_t b : before_) h = (h ^ b) * 0x100000001B3ull;
  return Point{bytes, live, h | 1};  // never 0, the name without context
}

RepeatPlaces::Places RepeatPlaces::last_places(std::size_t bytes) const {
  MutexLock lock(mu_);
  const std::size_t live = live_of(bytes);
  Places out{};
  std::size_t k = 0;
  for (const Point& p : {with_context(bytes, live), Point{bytes, live, 0}}) {
    const auto it = last_.find(p);
    if (it == last_.end()) continue;
    for (CUdeviceptr a : it->second)
      if (a != 0 && std::find(out.begin(), out.begin() + k, a) == out.begin() + k) out[k++] = a;
  }
  return out;
}

void RepeatPlaces::placed(std::size_t bytes, CUdeviceptr p) {
  MutexLock lock(mu_);
  const auto [at, fresh] = live_at_.try_emplace(p, bytes);
  if (!fresh) return;  // placed twice without a free between: a caller's slip, counted once
  std::size_t& live = live_[bytes];
  // places_ too: a name's addresses may change every time while the names stay few.
  if (last_.size() + 2 > kMostPoints || places_.size() >= kMostPoints) {
    last_.clear();
    places_.clear();
  }
  places_[p] = bytes;
  for (const Point& name : {with_context(bytes, live), Point{bytes, live, 0}}) {
    Got& got = last_[name];
    auto was = std::find(got.begin(), got.end(), p);
    if (was == got.end()) was = got.end() - 1;  // new: the oldest goes
    std::rotate(got.begin(), was, was + 1);     // p first, the others after it in their order
    got[0] = p;
  }
  ++live;
  for (std::size_t i = 0; i + 1 < kContext; ++i) before_[i] = before_[i + 1];
  before_[kContext - 1] = bytes;
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

bool RepeatPlaces::others_place(CUdeviceptr at, std::size_t bytes, std::size_t own) const {
  MutexLock lock(mu_);
  auto it = places_.upper_bound(at);
  if (it != places_.begin()) --it;  // one that begins before `at` may reach into it
  for (; it != places_.end() && it->first < at + bytes; ++it)
    if (it->first + it->second > at && it->second != own) return true;
  return false;
}

std::size_t RepeatPlaces::points() const {
  MutexLock lock(mu_);
  return last_.size();
}

}  // namespace uvmpool::pool
