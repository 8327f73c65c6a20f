// The device pool as placement's stock (placement.h): what the rule asks, carried out with the pool's
// own mechanisms. One per request, made and used under the pool's mu_ (the analysis cannot follow
// the rule's virtual calls, so its methods are not annotated: each is reached only from place() or
// reclaim_all(), which the pool calls with mu_ held).
#pragma once

#include <vector>

#include "pool/device_pool.h"
#include "pool/placement.h"

namespace uvmpool::pool {

class DevicePool::PoolStock final : public placement::Stock {
 public:
  // `pieces`: where the request's pieces go (cleared first). `runs`: a move's target, whose device
  // pieces are runs of its size's binary digits rather than chunks (pull_device_pieces).
  PoolStock(DevicePool& pool, std::vector<Chunk>* pieces, bool runs = false) UVMPOOL_REQUIRES(pool.mu_);

  std::size_t free_device() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  bool free_extent() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  std::size_t growable() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  void grow(std::size_t granules) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  std::size_t reclaim(placement::Idle source, std::size_t granules) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  bool reuse(placement::Whole whole, std::size_t granules) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  std::size_t take_device(std::size_t granules) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  std::size_t loose_host() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  bool take_host(std::size_t granules) override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;
  void give_back() override UVMPOOL_NO_THREAD_SAFETY_ANALYSIS;

  ~PoolStock() override;  // UVMPOOL_CHECKS: the free pieces agree with their figures again

  Block* reused() const { return reused_; }  // the mapping reuse() took (still marked Cached)

 private:
  DevicePool& p_;
  std::vector<Chunk>* pieces_;
  const bool runs_;
  Block* reused_ = nullptr;
};

}  // namespace uvmpool::pool
