// Where pool memory lives in the address space, which descriptor owns each granule of it, and in
// which tier each granule lies.
//
// Each device reserves large virtual regions once; every pool mapping is carved out of them. A
// region keeps a flat array with one entry per granule (chunk-sized piece of address space) naming
// the descriptor mapped there, so finding the allocation behind any pointer — on the free path, for
// cuPointerGetAttribute, for an interior pointer — is a few loads with no lock. A second array holds
// one byte per granule, set while host memory is mapped there: the launch hooks read it for every
// pointer a kernel is given (src/tiering), so they tell spilled memory from device memory without a
// lock, and skip looking at all while no granule is in host memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

// A descriptor pointer with its kind in its low bits (descriptors are at least 8-byte aligned): a
// Block (no tag), a Slab, or the DevicePool whose carved range holds the granule (carved_range.h).
using Entry = std::uintptr_t;
constexpr Entry kSlabTag = 1;
constexpr Entry kCarvedTag = 2;
constexpr Entry kTagMask = 3;

class AddressMap {
 public:
  static constexpr int kMaxRegions = 256;

  AddressMap() = default;
  ~AddressMap();
  AddressMap(const AddressMap&) = delete;
  AddressMap& operator=(const AddressMap&) = delete;

  // Starts tracking [base, base + size), whose granules are 1 << shift bytes. False when the table
  // is full or the entry array cannot be made.
  bool add_region(CUdeviceptr base, std::size_t size, unsigned shift);

  // Sets the entry of every granule of [p, p + bytes) (granule-aligned, inside one region). Entry 0
  // (nothing mapped) also clears their host marks.
  void set(CUdeviceptr p, std::size_t bytes, Entry entry);
  // The entry of the granule holding p, 0 when p is not in pool address space or nothing is mapped.
  Entry lookup(CUdeviceptr p) const;
  bool contains(CUdeviceptr p) const;

  // Marks [p, p + bytes) (granule-aligned, inside one region) as mapped to host memory or not. The
  // owner of the mapping calls it whenever the pieces under an address change tier or are mapped.
  void set_host(CUdeviceptr p, std::size_t bytes, bool host);
  // What is at p, for the launch hooks: the entry (0: nothing of the pool) and whether its granule is
  // in host memory. A pointer outside every region costs two loads.
  struct Probe {
    Entry entry = 0;
    bool host = false;
    CUdeviceptr granule_end = 0;  // where p's granule ends (0 with entry 0), for walking a range
  };
  Probe probe(CUdeviceptr p) const;
  // Granules marked host, all regions together.
  std::uint64_t host_granules() const { return host_granules_.load(std::memory_order_relaxed); }

 private:
  struct Region {
    std::atomic<CUdeviceptr> base{0};
    std::atomic<std::size_t> size{0};
    std::atomic<std::atomic<Entry>*> entries{nullptr};
    std::atomic<std::atomic<std::uint8_t>*> host{nullptr};  // one byte per granule: 1 in host memory
    unsigned shift = 0;
  };
  const Region* find(CUdeviceptr p) const;

  Region regions_[kMaxRegions];
  std::atomic<int> count_{0};
  Mutex add_mu_;  // devices add regions each under their own lock: one at a time here
  // The span of every region, for rejecting most words of a launch's arguments at once.
  std::atomic<CUdeviceptr> low_{~CUdeviceptr{0}};
  std::atomic<CUdeviceptr> high_{0};
  std::atomic<std::uint64_t> host_granules_{0};
};

// Address-ordered free ranges of one device's regions, best fit; the caller serializes. A range never
// spans two regions, even where the driver placed them end to end: a mapping may not cross a
// reservation, and the address map keeps one entry array per region.
class RangeAllocator {
 public:
  void add(CUdeviceptr base, std::size_t size);  // a new region
  // Best fit: the smallest free range that holds `size`, lowest address first, taken from its start.
  // With `avoid`, the first of the next kAvoidTries such ranges whose start it does not refuse, else
  // the best fit anyway.
  using Avoid = std::function<bool(CUdeviceptr start, std::size_t size)>;
  static constexpr int kAvoidTries = 16;
  std::optional<CUdeviceptr> take(std::size_t size, const Avoid& avoid = {});
  void give_back(CUdeviceptr base, std::size_t size);
  bool starts_region(CUdeviceptr p) const { return region_starts_.contains(p); }
  // Takes [base, base + size) out of the free range that holds it all (false, nothing taken, when
  // none does): a caller that chose where, not how much (CarvedRange's growth).
  bool take_at(CUdeviceptr base, std::size_t size);
  // The free range that ends exactly at `end` / begins exactly at `start`: its start / its size.
  std::optional<CUdeviceptr> free_ending_at(CUdeviceptr end) const;
  std::size_t free_starting_at(CUdeviceptr start) const;
  std::uint64_t free_bytes() const;  // all of them (invariant checks)

 private:
  std::map<CUdeviceptr, std::size_t> by_address_;
  std::set<std::pair<std::size_t, CUdeviceptr>> by_size_;
  std::set<CUdeviceptr> region_starts_;
};

}  // namespace uvmpool::pool
