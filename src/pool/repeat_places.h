// Where a stream-ordered allocation went the last time the program was at the same point: one part of
// a device pool (device_pool.h), with its own lock.
//
// Why. Tiering learns a training or decoding step by the addresses its kernels touch (docs/tiering.md,
// "The policy"): the same launches on the same buffers, period after period. A program whose frees
// reach the pool (PyTorch's `backend:cudaMallocAsync` frees every tensor with cuMemFreeAsync)
// allocates the same sizes in the same order every step, but which freed block each allocation gets
// back depends on the order of the frees: a backward pass frees activations in reverse, and the
// gradients of the activations, of the same size, in between. Reused most recently freed first, the
// training replay's activations took their neighbours' addresses every step (uvmpool-bench-tiering
// --workloads=freeing: 47 of 50 freed tensors changed address each step, a rotation), so no step
// was ever learned, on the simulator as on an H200 (docs/gpu-results.md, thirty-seventh entry).
//
// What. An allocation's point in the program is told apart by its size and by how many stream-ordered
// allocations of that size are live when it is made: the n-th activation of a forward pass finds n
// of its size live, each step, whatever the order they were freed in (a stack's depth, which is
// what a framework's nested lifetimes make). Not all lifetimes nest: allocate A, allocate B, free A,
// allocate C, and C finds one live as B did, at B's place, which B holds. So a point is also named
// with its context, the sizes of the three stream-ordered allocations before it, and that name is
// asked first. Replayed from an H200 trace of row 4b under the async backend (docs/gpu-results.md,
// thirty-eighth entry), with each allocation placed where asked whenever no live one held it: by
// size and depth alone, 2088 of 20581 allocations found their place held; asked with the context
// first, 1284. A name that a step uses more than once (lifetimes that do not nest, of one size,
// between the same sizes) keeps the last kPerName addresses it got, most recent first. The part
// answers those of both names, and the pool takes the first of them that is free
// (DevicePool::allocate_async): an open free on the stream there, one there still
// behind its event on the stream, a cached mapping there, or the carved range's free space there.
// Nothing else changes: an allocation whose places are not free is placed as before, and remembered
// anew.
//
// Keeping places. A name's place is only found again if nothing else took it meanwhile. In that H200
// run's trace the places missed were mostly free, or held by another size: best fit in the carved
// range fills the smallest free run that fits, and a freed place is just that for any smaller
// request. Replayed offline with a pool that only reuses a free block of the same size (and a fresh
// address when none), the names gave every one of the 2813 allocations of each step from the third
// on the address it had the step before. So a stream-ordered allocation that is not placed at its own
// place leaves the places remembered for other sizes alone where other free space fits
// (others_place, CarvedRange::Hint::avoid).
//
// Cost: one lock and a few hash lookups per stream-ordered allocation and free, and one lookup for
// each free run best fit looks at (up to RangeAllocator::kAvoidTries) when one is carved away from its
// places; nothing on any other path. Remembered names, and the addresses they named, are capped (kMostPoints
// each); past either cap both are forgotten all at once.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

class RepeatPlaces {
 public:
  static constexpr std::size_t kMostPoints = 1 << 16;
  static constexpr std::size_t kContext = 3;  // allocations before it that name a point with its context

  // Places a name keeps, most recent first. Replaying the 10 steps of row 4b's allocations from call
  // 7's trace (docs/gpu-results.md, thirty-eighth entry) as uvmpool-bench-places does, the last step
  // had 2065 of 2813 at the address of the step before with 1, 2106 with 2, 2327 with 3, 2062 with 5.
  static constexpr std::size_t kPerName = 3;
  using Places = std::array<CUdeviceptr, 2 * kPerName>;
  // Where the allocation of `bytes` about to be made went lately: named with its context, then by its
  // size and depth alone, each name's places most recent first; 0s where none is remembered.
  Places last_places(std::size_t bytes) const;
  // An allocation of `bytes` made at `p`: remembered under both names, and counted live until freed(p).
  void placed(std::size_t bytes, CUdeviceptr p);
  // A stream-ordered allocation freed (not one placed here: nothing, and no lock while none is live,
  // so that a program that never allocates on streams pays a load a free).
  void freed(CUdeviceptr p);

  // Whether [at, at + bytes) overlaps a place remembered for a size other than `own`.
  bool others_place(CUdeviceptr at, std::size_t bytes, std::size_t own) const;

  std::size_t points() const;  // names remembered now (tests)

 private:
  struct Point {
    std::size_t bytes;
    std::size_t live;          // of that size, before it
    std::uint64_t context;     // the sizes before it, hashed; 0: named without
    bool operator==(const Point&) const = default;
  };
  struct PointHash {
    std::size_t operator()(const Point& p) const {
      return (p.bytes * 0x9E3779B97F4A7C15ull) ^ (p.live * 0xC2B2AE3D27D4EB4Full) ^ p.context;
    }
  };
  Point with_context(std::size_t bytes, std::size_t live) const UVMPOOL_REQUIRES(mu_);
  std::size_t live_of(std::size_t bytes) const UVMPOOL_REQUIRES(mu_);

  mutable Mutex mu_;  // a leaf
  std::unordered_map<std::size_t, std::size_t> live_ UVMPOOL_GUARDED_BY(mu_);        // bytes -> live of that size
  std::unordered_map<CUdeviceptr, std::size_t> live_at_ UVMPOOL_GUARDED_BY(mu_);     // live address -> bytes
  using Got = std::array<CUdeviceptr, kPerName>;
  std::unordered_map<Point, Got, PointHash> last_ UVMPOOL_GUARDED_BY(mu_);   // name -> addresses it got
  std::array<std::size_t, kContext> before_ UVMPOOL_GUARDED_BY(mu_) = {};            // sizes, oldest first
  std::map<CUdeviceptr, std::size_t> places_ UVMPOOL_GUARDED_BY(mu_);  // every address last_ named: its size
  std::atomic<std::size_t> tracked_{0};  // live_at_'s size: written under mu_, read without it
};

}  // namespace uvmpool::pool
