#include "pool/held_frees.h"

#include <algorithm>

namespace uvmpool::pool {

bool HeldFrees::hold(CUdeviceptr p, CUcontext context) {
  MutexLock lock(mu_);
  if (std::any_of(held_.begin(), held_.end(), [&](const Held& h) { return h.p == p; })) return false;
  held_.push_back({p, context});
  count_.store(held_.size(), std::memory_order_release);
  return true;
}

bool HeldFrees::holds(CUdeviceptr p) const {
  MutexLock lock(mu_);
  return std::any_of(held_.begin(), held_.end(), [&](const Held& h) { return h.p == p; });
}

std::vector<HeldFrees::Held> HeldFrees::take(const std::function<bool(CUcontext)>& capturing, CUcontext gone) {
  std::vector<Held> out;
  MutexLock lock(mu_);
  // Few contexts, few frees (only those made during a capture): each context is asked once.
  std::vector<CUcontext> ended, capturing_still;
  const auto contains = [](const std::vector<CUcontext>& v, CUcontext c) { return std::find(v.begin(), v.end(), c) != v.end(); };
  const auto over = [&](CUcontext c) {
    if (c == gone || contains(ended, c)) return true;
    if (contains(capturing_still, c)) return false;
    const bool now = !capturing(c);
    (now ? ended : capturing_still).push_back(c);
    return now;
  };
  std::erase_if(held_, [&](const Held& h) {
    if (!over(h.context)) return false;
    out.push_back(h);
    return true;
  });
  count_.store(held_.size(), std::memory_order_release);
  return out;
}

}  // namespace uvmpool::pool
