// A device pool's cache of freed mappings: one part of it (device_pool.h), with its own locks.
//
// Device mappings (no host piece) are binned by chunk count: a direct bin per count below
// kDirectBins, each a list under its own lock, most recently freed first, so allocations of different
// sizes never meet; one ordered bin (big_mu_) above. Mappings with host pieces are kept apart under
// one lock (spilled_mu_), so a freed spilled allocation never keeps a later one off free device
// memory: spilled ones (device and host pieces, or host extents) by count, and host runs (wholly host
// chunks, premapped by the reserve thread or left by frees) for any smaller request to cut.
//
// Mappings with host pieces are taken by address: of those that fit, the lowest first. Why not the
// first freed: a program whose frees reach the pool (PyTorch's backend:cudaMallocAsync) allocates the
// same sizes in the same order every step, and tiering learns the step by its addresses
// (docs/tiering.md, "Frees that reach the pool"). Taken first freed first, the spilled activations a
// backward pass frees in reverse came back mirrored every other step and no step was learned
// (uvmpool-bench-tiering --workloads=freeing); by address each gets the mapping it had the step
// before. Device mappings keep recency (their pages likelier in the TLB): taken by address there, the
// churn replay with carving off built more mappings (modeled 122.2 -> 137.7 ms), and first-come
// placement of the freeing replay is as stable without it.
//
// The part files and finds descriptors and counts its own hits and frees; a mapping's state, what
// its caching changes in the pool's figures, and taking one apart are the pool's (large_blocks.cpp).
// Lock order: each lock here is taken alone or inside the pool's mu_, never one inside another.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "pool/size_classes.h"

namespace uvmpool::pool {

struct Block;
struct DeviceStats;

class MappingCache {
 public:
  static constexpr std::size_t kDirectBins = 512;

  MappingCache();
  void init(std::size_t chunk, bool counters);  // before first use (DevicePool::init)

  // Device mappings.
  void put(Block* b, bool count_free);  // `count_free`: a cuMemFree, counted as a free
  Block* take(std::size_t granules);    // one of exactly that count, the most recently freed (a hit)
  bool unbin(Block* b);                 // out of its bin if it is still there (false: taken meanwhile)
  std::vector<Block*> device_mappings();  // every one binned now, in no order (each taken out by unbin)
  // The next to take apart for `need` chunks: the least recently freed of the smallest count that
  // covers it; else the largest. nullptr when none is binned.
  Block* victim(std::size_t need);

  // Mappings with host pieces.
  void put_with_host(Block* b);                 // a host run if b->host_run(), else spilled
  Block* take_spilled(std::size_t granules);    // a spilled one of exactly that count
  // The smallest run that covers `at_least` (0: the smallest of all); with `largest`, the largest,
  // if it covers it.
  Block* take_host_run(std::size_t at_least, bool largest = false);
  bool withdraw_with_host(Block* b);            // out of its bin if it is still there
  // Every spilled mapping (only those that hold device pieces too, when `only_with_device`); with
  // `host_runs`, every host run as well, into *runs.
  std::vector<Block*> take_spilled_all(bool only_with_device, bool host_runs, std::vector<Block*>* runs);

  void add_counts(DeviceStats& s) const;  // the bins' hits and frees, into allocations, cache hits, frees
  std::string check();                    // the direct bins' lists against their counts (tests, quiescent)

 private:
  struct Bin {
    Mutex mu;
    Block* head UVMPOOL_GUARDED_BY(mu) = nullptr;  // most recently freed first
    Block* tail UVMPOOL_GUARDED_BY(mu) = nullptr;
    std::atomic<std::size_t> count{0};  // written under mu, read without it to skip empty bins
    // Under mu: a plain load and store, no atomic read-modify-write on the fast path.
    void add(std::ptrdiff_t delta) {
      count.store(count.load(std::memory_order_relaxed) + static_cast<std::size_t>(delta), std::memory_order_relaxed);
    }
    // Statistics, counted under mu: mappings taken from this bin (cache hits) and freed into it by cuMemFree.
    std::atomic<std::uint64_t> taken{0};
    std::atomic<std::uint64_t> returned{0};
  };
  Block* pop_least_recent(std::size_t granules);
  Block* pop_big(std::size_t need, bool smallest_covering);
  void bump(std::atomic<std::uint64_t>& n) const {  // under the lock that guards n
    if (counters_) n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  std::size_t chunk_ = 0;
  bool counters_ = false;
  std::unique_ptr<Bin[]> bins_;
  Mutex big_mu_;
  std::multimap<std::size_t, Block*> big_bin_ UVMPOOL_GUARDED_BY(big_mu_);
  std::atomic<std::uint64_t> big_taken_[kSizeBuckets] = {};  // as Bin::taken, under big_mu_
  std::atomic<std::uint64_t> big_returned_{0};
  Mutex spilled_mu_;
  // By chunk count, then address (above).
  using HostBin = std::map<std::pair<std::size_t, CUdeviceptr>, Block*>;
  HostBin spilled_bin_ UVMPOOL_GUARDED_BY(spilled_mu_);  // part device, part host
  HostBin host_bin_ UVMPOOL_GUARDED_BY(spilled_mu_);     // wholly host chunks: runs
};

}  // namespace uvmpool::pool
