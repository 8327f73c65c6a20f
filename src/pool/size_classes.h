// Size classes of small allocations: multiples of 256 B up to 4 KiB, then eight classes per
// doubling (at most 12.5% rounding), up to 1 MiB. Every class is a multiple of 256 B, so slots cut
// from a chunk-aligned slab keep cudaMalloc's 256-byte alignment (and 512 B where the class is a
// multiple of 512, which pitched allocations ask for).
#pragma once

#include <bit>
#include <cstddef>

namespace uvmpool::pool {

constexpr std::size_t kMinSlot = 256;
constexpr std::size_t kLinearMax = 4096;
constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
constexpr int kLinearClasses = static_cast<int>(kLinearMax / kMinSlot);  // 256 .. 4096
constexpr int kStepsPerDoubling = 8;

// The class of a request of `bytes` (1 .. kSmallLimit).
constexpr int small_class(std::size_t bytes) {
  if (bytes <= kLinearMax) return static_cast<int>((bytes + kMinSlot - 1) / kMinSlot) - 1;
  const int p = static_cast<int>(std::bit_width(bytes - 1)) - 1;  // 2^p < bytes <= 2^(p+1)
  const std::size_t low = std::size_t{1} << p;
  const std::size_t step = low / kStepsPerDoubling;
  const int k = static_cast<int>((bytes - low + step - 1) / step);  // 1 .. 8
  return kLinearClasses + (p - 12) * kStepsPerDoubling + (k - 1);
}

constexpr std::size_t class_size(int cls) {
  if (cls < kLinearClasses) return static_cast<std::size_t>(cls + 1) * kMinSlot;
  const int p = 12 + (cls - kLinearClasses) / kStepsPerDoubling;
  const int k = (cls - kLinearClasses) % kStepsPerDoubling + 1;
  const std::size_t low = std::size_t{1} << p;
  return low + static_cast<std::size_t>(k) * (low / kStepsPerDoubling);
}

constexpr int kSmallClasses = small_class(kSmallLimit) + 1;

// Size buckets of the statistics' "allocations by size" (requested bytes, upper bounds inclusive):
// 4K, 64K, 1M (the slabs), 2M (one chunk), then every factor of 4 up to 2G, and above.
constexpr int kSizeBuckets = 10;
constexpr const char* kSizeBucketNames[kSizeBuckets] = {"4K", "64K", "1M", "2M", "8M", "32M", "128M", "512M", "2G", "inf"};
constexpr int size_bucket(std::size_t bytes) {
  const int p = bytes <= 1 ? 0 : static_cast<int>(std::bit_width(bytes - 1));  // 2^(p-1) < bytes <= 2^p
  if (p <= 12) return 0;
  if (p <= 16) return 1;
  if (p <= 20) return 2;
  if (p == 21) return 3;
  return p >= 32 ? 9 : 4 + (p - 22) / 2;
}
static_assert(size_bucket(4096) == 0 && size_bucket(4097) == 1 && size_bucket(1 << 20) == 2);
static_assert(size_bucket(2 << 20) == 3 && size_bucket((2 << 20) + 1) == 4 && size_bucket(8 << 20) == 4);
static_assert(size_bucket((512ull << 20) + 1) == 8 && size_bucket(2ull << 30) == 8 && size_bucket((2ull << 30) + 1) == 9);

static_assert(class_size(small_class(1)) == 256);
static_assert(class_size(small_class(4097)) == 4608);
static_assert(class_size(small_class(kSmallLimit)) == kSmallLimit);
static_assert(class_size(small_class(900 * 1024)) == 960 * 1024);

}  // namespace uvmpool::pool
