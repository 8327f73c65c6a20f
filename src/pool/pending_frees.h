// Memory freed on streams (cuMemFreeAsync) that work queued before the free may still use: one part
// of a device pool (device_pool.h), with a lock of its own.
//
// Per stream, the frees not yet covered by an event (open); and batches of frees behind an event
// recorded on their stream. Allocations on the same stream may take an open free at once (stream
// order makes that safe: take_on_stream); anyone else gets a free only once its batch's event has
// completed (collect). Events are recorded lazily — when someone else needs memory — one per stream
// for all its frees since, so a free costs no driver call. The per-thread default stream can only be
// named by its own thread, so its frees record their event at once (add).
//
// The part holds descriptors, never frees anything itself: what is ready comes back to the pool,
// which caches it (DevicePool::release_pending).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "pool/device_waits.h"

namespace uvmpool::pool {

struct Block;
struct Slab;

// A stream as the pool tells streams apart: the per-thread default stream is one per thread.
struct StreamKey {
  CUstream stream = nullptr;
  CUcontext context = nullptr;
  std::thread::id thread{};  // only for CU_STREAM_PER_THREAD
  bool operator==(const StreamKey&) const = default;
};
struct StreamKeyHash {
  std::size_t operator()(const StreamKey& k) const;
};

// One free on a stream: a stitched mapping, a slab's slot or a carved allocation.
struct PendingItem {
  Block* block = nullptr;
  Slab* slab = nullptr;
  std::uint32_t slot = 0;
  CUdeviceptr carved = 0;  // a carved allocation (neither block nor slab)
  std::size_t carved_bytes = 0;  // its size as asked for
};

class PendingFrees {
 public:
  // `waits`: told before each of the part's own waits for the device (device_waits.h).
  PendingFrees(const driver::Table& driver, int device, const std::atomic<DeviceWaits*>& waits);
  ~PendingFrees();  // destroys its events (tests; the process's pool is never destroyed)
  PendingFrees(const PendingFrees&) = delete;
  PendingFrees& operator=(const PendingFrees&) = delete;

  // Nothing pending: read without the lock, to skip the part on every allocation.
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

  // The open free on `stream` that `rank` likes best (0: no, 1: acceptable, 2: exact, which ends the
  // search), the most recently freed first, taken off the list if `claim` agrees (both called under
  // the part's lock, which a move's claim must not wait for); nullopt otherwise.
  template <class Rank, class Claim>
  std::optional<PendingItem> take_on_stream(const StreamKey& stream, Rank&& rank, Claim&& claim);
  // The free on `stream` that `wanted` names (RepeatPlaces: at a given address), open or in a batch of
  // the stream's still waiting for its event (stream order makes that as safe to reuse on the stream
  // that freed it), taken off if `claim` agrees; nullopt otherwise.
  template <class Wanted, class Claim>
  std::optional<PendingItem> take_wanted(const StreamKey& stream, Wanted&& wanted, Claim&& claim);

  // A free on `stream`. An item that comes back could not be put behind an event (the per-thread
  // default stream's failed): its stream was waited for, so it is ready now.
  std::optional<PendingItem> add(const StreamKey& stream, PendingItem item);
  // Every stream's open frees put behind events; the items whose events completed (with `wait`, all
  // of them, waiting for the device).
  std::vector<PendingItem> collect(bool wait);
  // Before cuStreamDestroy: the stream's open frees put behind an event (or, failing that, its context
  // waited for: those come back ready); once destroyed, its handle may name another stream.
  std::vector<PendingItem> seal(CUstream stream);
  // Before `context` is destroyed (cuCtxDestroy, a primary context's reset or last release): its
  // streams and events go with it, and its handle may name the next context made. Its frees are
  // waited for (one cuCtxSynchronize, only if it has any) and come back ready; its events, pending
  // and spare, are destroyed while it exists. Nothing of another context is touched.
  std::vector<PendingItem> forget_context(CUcontext context);

 private:
  struct Batch {
    CUevent event = nullptr;
    CUcontext context = nullptr;  // the event's
    std::vector<PendingItem> items;
    std::optional<StreamKey> stream;  // the stream it was freed on, until that stream is destroyed
  };
  // An event is recorded only on a stream of its own context, so spare events are kept by context.
  struct Spare {
    CUcontext context = nullptr;
    CUevent event = nullptr;
  };
  // A spare event of `context`, else one made now (`context` is current).
  CUevent take_event(CUcontext context) UVMPOOL_REQUIRES(mu_);
  // Moves one stream's open frees into a batch behind an event on it; what cannot get an event is
  // waited for and added to `ready`.
  void seal_locked(const StreamKey& key, std::vector<PendingItem>& open, std::vector<PendingItem>* ready)
      UVMPOOL_REQUIRES(mu_);
  // Whether the stream of `key` is capturing a graph now (its frees are then left open).
  bool capturing(const StreamKey& key) const;
  // seal_locked for every stream's open frees (`only`: that stream's; else not those of a stream
  // capturing a graph), their entries dropped.
  void seal_streams_locked(const CUstream* only, std::vector<PendingItem>* ready) UVMPOOL_REQUIRES(mu_);

  const driver::Table& d_;
  const int device_;
  const std::atomic<DeviceWaits*>& device_waits_;
  // A leaf but for the device waits above (an allocation under the pool's mu_ may wait for it).
  Mutex mu_;
  std::unordered_map<StreamKey, std::vector<PendingItem>, StreamKeyHash> open_ UVMPOOL_GUARDED_BY(mu_);
  std::deque<Batch> batches_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<Spare> spare_events_ UVMPOOL_GUARDED_BY(mu_);
  std::atomic<std::size_t> count_{0};  // items in open_ and batches_ (and one being added)
};

template <class Rank, class Claim>
std::optional<PendingItem> PendingFrees::take_on_stream(const StreamKey& stream, Rank&& rank, Claim&& claim) {
  if (empty()) return std::nullopt;
  MutexLock lock(mu_);
  auto it = open_.find(stream);
  if (it == open_.end()) return std::nullopt;
  std::vector<PendingItem>& open = it->second;
  auto match = open.end();
  for (auto i = open.rbegin(); i != open.rend(); ++i) {
    const int r = rank(*i);
    if (r == 0) continue;
    if (match == open.end()) match = std::next(i).base();
    if (r == 2) {
      match = std::next(i).base();
      break;
    }
  }
  if (match == open.end() || !claim(*match)) return std::nullopt;
  const PendingItem item = *match;
  *match = open.back();
  open.pop_back();
  count_.fetch_sub(1, std::memory_order_relaxed);
  return item;
}

template <class Wanted, class Claim>
std::optional<PendingItem> PendingFrees::take_wanted(const StreamKey& stream, Wanted&& wanted, Claim&& claim) {
  if (empty()) return std::nullopt;
  MutexLock lock(mu_);
  const auto take = [&](std::vector<PendingItem>& items) -> std::optional<PendingItem> {
    for (auto i = items.rbegin(); i != items.rend(); ++i) {
      if (!wanted(*i)) continue;
      if (!claim(*i)) return std::nullopt;
      const PendingItem item = *i;
      items.erase(std::next(i).base());
      count_.fetch_sub(1, std::memory_order_relaxed);
      return item;
    }
    return std::nullopt;
  };
  if (auto it = open_.find(stream); it != open_.end())
    if (std::optional<PendingItem> item = take(it->second)) return item;
  for (Batch& b : batches_)
    if (b.stream == stream)
      if (std::optional<PendingItem> item = take(b.items)) return item;
  return std::nullopt;
}

}  // namespace uvmpool::pool
