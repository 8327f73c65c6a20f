// The host tier: the pinned host chunks that spilled allocations map, the process-wide cap on them
// (UVMPOOL_HOST_LIMIT), and the background thread that pins them ahead of need.
//
// Pinning is slow (0.4 to 0.7 ms per 2 MiB chunk on an H200, about 0.8 s per 4 GiB), far too slow for
// an allocation path. So each device keeps a reserve of pinned, unmapped host chunks once its pool is
// half full; a spill takes from the reserve with no pinning, and only an empty reserve pins inline (in
// a batch, so the next spills find chunks again). The reserve's target grows to twice the largest
// spill seen (up to 4 GiB), and falls back to its base (UVMPOOL_HOST_RESERVE) when no spill has come for a while; chunks above
// the target (those of freed spilled memory too) are then given back to the system.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "config/thread_safety.h"
#include "pool/vmm.h"

namespace uvmpool::pool {

class HostReserve;

// Process-wide: the host limit and the thread that keeps every device's reserve (started on first need).
class HostTier {
 public:
  // `driver`: the thread takes the relaxed capture mode on it (driver/capture_mode.h).
  HostTier(const driver::Table& driver, std::uint64_t limit, std::chrono::milliseconds idle)
      : d_(driver), limit_(limit), idle_(idle) {}
  ~HostTier() { stop(); }
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  std::uint64_t limit() const { return limit_; }
  std::uint64_t charged() const { return charged_.load(std::memory_order_relaxed); }
  // Counts `bytes` more pinned host memory against the limit; false (nothing counted) past it.
  bool charge(std::uint64_t bytes);
  void uncharge(std::uint64_t bytes) { charged_.fetch_sub(bytes, std::memory_order_relaxed); }
  // How long a reserve goes without a spill before it shrinks back to its base.
  std::chrono::milliseconds idle() const { return idle_; }

  // A device's upkeep, called by the thread until it returns false (nothing more to do for now).
  void add(std::function<bool()> upkeep);
  // Asks the thread to look at the reserves now (starting it the first time).
  void wake();
  // No more background work: waits for the driver call in flight, if any, and ends the thread.
  void stop();
  // After fork, in the child: the thread does not exist there; forget it without touching it.
  void abandon() { abandoned_ = true; }

 private:
  void run();

  const driver::Table& d_;
  const std::uint64_t limit_;
  const std::chrono::milliseconds idle_;
  std::atomic<std::uint64_t> charged_{0};
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<bool()>> upkeeps_ UVMPOOL_GUARDED_BY(mu_);
  std::thread thread_ UVMPOOL_GUARDED_BY(mu_);
  bool woken_ UVMPOOL_GUARDED_BY(mu_) = false;
  bool stopping_ UVMPOOL_GUARDED_BY(mu_) = false;
  bool abandoned_ = false;
};

// One device's pinned host chunks that are not mapped: the next spills' memory.
class HostReserve {
 public:
  // `base_bytes`: the reserve kept once armed (rounded up to whole chunks).
  HostReserve(const Vmm& vmm, HostTier& tier, std::size_t chunk, std::uint64_t base_bytes);
  static constexpr std::size_t kBatch = 16;  // chunks pinned or released per step
  ~HostReserve();  // releases the chunks it holds (the tests' pools; the process's is never destroyed)
  HostReserve(const HostReserve&) = delete;
  HostReserve& operator=(const HostReserve&) = delete;

  // Appends n host chunks to `out`: from the reserve, pinning the shortfall inline when it is empty.
  // OUT_OF_MEMORY (nothing appended) when the host limit or the system cannot pin them.
  CUresult take(std::size_t n, std::vector<Chunk>* out);
  // Host extents, for moves to the host tier only: pinned handles of `granules` chunks each, one
  // mapping apiece where chunks would make one each (cuMemSetAccess and cuMemUnmap cost per mapping,
  // of any size: a demoted 1 GiB remaps as 32 extents instead of 512 chunks). Appends up to `count`
  // to `out` from the stock, pinning what it lacks inline (a move is prepared off the program's
  // threads), and returns how many: fewer where the host limit or the system says no. Promoted
  // ranges give theirs back (give_back) for the next demotion; an idle reserve releases them.
  std::size_t take_extents(std::size_t count, std::uint32_t granules, std::vector<Chunk>* out);
  // Host pieces no longer mapped come back here, chunks and extents (and go back to the system once
  // idle).
  void give_back(std::span<const Chunk> chunks);
  // Up to n chunks the reserve holds now, without pinning (the device pool premaps them); how many.
  std::size_t take_ready(std::size_t n, std::vector<Chunk>* out);
  // A spill served by premapped host memory (n chunks): counts as a take for the reserve's sizing.
  void note_take(std::size_t n);
  // Premapped chunks: host chunks the device pool mapped ahead of need out of this reserve. They count
  // as ready memory for the target.
  void premapped(std::ptrdiff_t delta) { premapped_.fetch_add(static_cast<std::size_t>(delta), std::memory_order_relaxed); }
  std::size_t premapped() const { return premapped_.load(std::memory_order_relaxed); }
  // The share of the target kept unmapped (for allocations that are part device, and slabs); the rest
  // is premapped.
  std::size_t unmapped_target() const;
  std::size_t target() const;
  bool idle() const;  // no spill for UVMPOOL's idle time
  // Pins until the reserve holds `chunks` (tests and benchmarks; the thread does this otherwise).
  CUresult fill(std::size_t chunks);
  // The device is filling up: from now on keep the reserve at its target.
  void arm();
  // Releases every chunk in the reserve (release_idle).
  void drain();
  // Stops keeping the reserve at its target until the device fills up again (arm) or a spill grows it,
  // and waits for what the thread has in flight to land: release_idle calls it first, so no chunk
  // pinned or premapped during the release is mapped again after it. Without the pool's lock: a
  // premap in flight takes it to land.
  void disarm();
  void abandon() { abandoned_ = true; }

  // The thread's work, one batch at a time: pin until ready memory (unmapped + premapped) reaches the
  // target, or give back unmapped chunks above their share once idle. True when it did something.
  bool upkeep();

  // Chunks the thread holds between two places (being pinned, already charged to the host limit;
  // taken by take_ready to be premapped; taken out to be unpinned) belong to no one an allocation can
  // take from. landed(n): n taken by take_ready are now a premapped run or back in the reserve.
  void landed(std::size_t n);

  // An allocation that failed while the thread had chunks in flight must not fail for that: it holds
  // the thread off (waiting for what is in flight to land: one batch, a few ms) and, when anything
  // landed since it began (landings()), tries again. While a hold lasts the thread starts nothing
  // (take_ready takes nothing, upkeep does nothing), so it cannot take away again between the wait
  // and the retry what the retry needs; the thread is woken when the last hold ends.
  class [[nodiscard]] Hold {
   public:
    explicit Hold(HostReserve& r) : r_(r) { r_.begin_hold(); }
    ~Hold() { r_.end_hold(); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    HostReserve& r_;
  };

  // Batches of the thread's that have landed (pinned, premapped, unpinned, or given up), ever.
  std::uint64_t landings() const { return landings_.load(std::memory_order_acquire); }

  std::size_t size() const { return size_.load(std::memory_order_relaxed); }         // chunks in the reserve
  std::size_t extent_granules() const { return extent_granules_.load(std::memory_order_relaxed); }  // in its extents
  std::uint64_t held() const { return held_.load(std::memory_order_relaxed); }       // pinned, mapped or not
  std::uint64_t peak_held() const { return peak_held_.load(std::memory_order_relaxed); }
  std::uint64_t pinned_inline() const { return inline_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  // Pins n chunks (charging the limit), or none. Called without mu_.
  CUresult pin(std::size_t n, std::vector<Handle>* out);
  std::size_t unmapped_target_locked() const UVMPOOL_REQUIRES(mu_);
  void grow_target_locked(std::size_t n) UVMPOOL_REQUIRES(mu_);
  void unpin(std::span<const Handle> chunks);
  void unpin_extents(std::span<const Chunk> extents);
  void note_pinned(std::uint64_t granules);  // held_ and its peak, after pinning
  bool release_extents();  // the stock of host extents back to the system; false when it was empty
  void begin_hold();
  void end_hold();
  void land_locked(std::size_t n) UVMPOOL_REQUIRES(mu_);  // n in flight no more

  const Vmm& vmm_;
  HostTier& tier_;
  const std::size_t chunk_;
  const std::size_t base_;  // chunks
  const std::size_t cap_;   // most the target grows to

  mutable Mutex mu_;
  std::vector<Handle> chunks_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<Chunk> extents_ UVMPOOL_GUARDED_BY(mu_);  // host extents not mapped (take_extents)
  std::size_t target_ UVMPOOL_GUARDED_BY(mu_) = 0;  // 0 until armed
  std::size_t in_flight_ UVMPOOL_GUARDED_BY(mu_) = 0;  // chunks being pinned, premapped or unpinned
  std::condition_variable landed_cv_;  // in_flight_ fell to 0 (mu_)
  std::size_t holds_ UVMPOOL_GUARDED_BY(mu_) = 0;  // allocations retrying (Hold): start nothing
  Clock::time_point last_take_ UVMPOOL_GUARDED_BY(mu_){};
  bool abandoned_ = false;

  std::atomic<std::uint64_t> landings_{0};  // written under mu_
  std::atomic<std::size_t> size_{0};
  std::atomic<std::size_t> extent_granules_{0};
  std::atomic<std::size_t> premapped_{0};
  std::atomic<std::uint64_t> held_{0};
  std::atomic<std::uint64_t> peak_held_{0};
  std::atomic<std::uint64_t> inline_{0};
};

}  // namespace uvmpool::pool
