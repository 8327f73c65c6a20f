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
// what a framework's nested lifetimes make). The part remembers the address each such point got last,
// and the pool's reuse on the stream takes the open free at that address first, when there is one
// (DevicePool::reuse_on_stream). Nothing else changes: a point whose last address is not free on the
// stream is placed as before, and remembered anew.
//
// Cost: one lock and two hash lookups per stream-ordered allocation and free, nothing on any other
// path. Remembered points are capped (kMostPoints); past it they are forgotten all at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

class RepeatPlaces {
 public:
  static constexpr std::size_t kMostPoints = 1 << 16;

  // The address the allocation of `bytes` about to be made got the last time as many of its size
  // were live; 0 when none is remembered.
  CUdeviceptr last_place(std::size_t bytes) const;
  // An allocation of `bytes` made at `p`: remembered for its point, and counted live until freed(p).
  void placed(std::size_t bytes, CUdeviceptr p);
  // A stream-ordered allocation freed (not one placed here: nothing, and no lock while none is live,
  // so that a program that never allocates on streams pays a load a free).
  void freed(CUdeviceptr p);

  std::size_t points() const;  // remembered now (tests)

 private:
  struct Point {
    std::size_t bytes;
    std::size_t live;  // of that size, before it
    bool operator==(const Point&) const = default;
  };
  struct PointHash {
    std::size_t operator()(const Point& p) const { return p.bytes * 0x9E3779B97F4A7C15ull ^ p.live; }
  };

  mutable Mutex mu_;  // a leaf
  std::unordered_map<std::size_t, std::size_t> live_ UVMPOOL_GUARDED_BY(mu_);        // bytes -> live of that size
  std::unordered_map<CUdeviceptr, std::size_t> live_at_ UVMPOOL_GUARDED_BY(mu_);     // live address -> bytes
  std::unordered_map<Point, CUdeviceptr, PointHash> last_ UVMPOOL_GUARDED_BY(mu_);   // point -> address it got
  std::atomic<std::size_t> tracked_{0};  // live_at_'s size: written under mu_, read without it
};

}  // namespace uvmpool::pool
