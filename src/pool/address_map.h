// Where pool memory lives in the address space, and which descriptor owns each granule of it.
//
// Each device reserves large virtual regions once; every pool mapping is carved out of them. A
// region keeps a flat array with one entry per granule (chunk-sized piece of address space) naming
// the descriptor mapped there, so finding the allocation behind any pointer — on the free path, for
// cuPointerGetAttribute, for an interior pointer — is a few loads with no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "driver/driver_api.h"

namespace uvmpool::pool {

// A descriptor pointer with its kind in bit 0 (descriptors are at least 8-byte aligned).
using Entry = std::uintptr_t;
constexpr Entry kSlabTag = 1;

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

  // Sets the entry of every granule of [p, p + bytes) (granule-aligned, inside one region).
  void set(CUdeviceptr p, std::size_t bytes, Entry entry);
  // The entry of the granule holding p, 0 when p is not in pool address space or nothing is mapped.
  Entry lookup(CUdeviceptr p) const;
  bool contains(CUdeviceptr p) const;

 private:
  struct Region {
    std::atomic<CUdeviceptr> base{0};
    std::atomic<std::size_t> size{0};
    std::atomic<std::atomic<Entry>*> entries{nullptr};
    unsigned shift = 0;
  };
  const Region* find(CUdeviceptr p) const;

  Region regions_[kMaxRegions];
  std::atomic<int> count_{0};
};

// Address-ordered free ranges of one device's regions, best fit; the caller serializes. A range never
// spans two regions, even where the driver placed them end to end: a mapping may not cross a
// reservation, and the address map keeps one entry array per region.
class RangeAllocator {
 public:
  void add(CUdeviceptr base, std::size_t size);  // a new region
  std::optional<CUdeviceptr> take(std::size_t size);
  void give_back(CUdeviceptr base, std::size_t size);
  bool starts_region(CUdeviceptr p) const { return region_starts_.contains(p); }

 private:
  std::map<CUdeviceptr, std::size_t> by_address_;
  std::set<std::pair<std::size_t, CUdeviceptr>> by_size_;
  std::set<CUdeviceptr> region_starts_;
};

}  // namespace uvmpool::pool
