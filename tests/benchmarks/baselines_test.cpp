// The fragmentation benchmark's baselines (caching_allocator.h, expandable_segments.h), one typed
// suite over both, on the simulated driver: their figures are only as good as their bookkeeping, so
// blocks must not overlap, must keep their bytes, and freed space must be found again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "caching_allocator.h"
#include "driver/real_driver.h"
#include "expandable_segments.h"

namespace uvmpool::bench {
namespace {

constexpr std::size_t kMiB = 1 << 20;

const Device& device() {
  static const Device d = open_device(0);
  return d;
}

template <typename A>
class Baseline : public ::testing::Test {
 protected:
  Baseline() {
    const Device& d = device();  // initializes the driver and makes the device's context current
    if constexpr (std::is_same_v<A, CachingAllocator>)
      allocator = std::make_unique<A>(drv());
    else
      allocator = std::make_unique<A>(drv(), d.device, d.total_memory);
  }
  CUdeviceptr allocate(std::size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(allocator->allocate(&p, bytes), CUDA_SUCCESS);
    EXPECT_NE(p, 0u);
    EXPECT_EQ(p % 512, 0u);
    return p;
  }
  std::unique_ptr<A> allocator;
};

using Baselines = ::testing::Types<CachingAllocator, ExpandableSegments>;
TYPED_TEST_SUITE(Baseline, Baselines);

// Blocks of mixed sizes, some freed and allocated again, never overlap and keep what was written.
TYPED_TEST(Baseline, BlocksDoNotOverlapAndKeepTheirBytes) {
  std::vector<std::pair<CUdeviceptr, std::size_t>> live;
  const std::size_t sizes[] = {300, 4096, 700 * 1024, 3 * kMiB, 13 * kMiB + 5, 25 * kMiB, 1000};
  for (int round = 0; round < 3; ++round) {
    for (std::size_t n : sizes) live.emplace_back(this->allocate(n), n);
    for (std::size_t i = round; i < live.size(); i += 3) {  // free a third, of every size
      this->allocator->deallocate(live[i].first);
      live[i].second = 0;
    }
    std::erase_if(live, [](const auto& b) { return b.second == 0; });
  }
  auto sorted = live;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i)
    EXPECT_LE(sorted[i - 1].first + sorted[i - 1].second, sorted[i].first) << "blocks overlap";
  for (std::size_t i = 0; i < live.size(); ++i)
    ASSERT_EQ(drv().cuMemsetD8_v2(live[i].first, static_cast<unsigned char>(i + 1), live[i].second), CUDA_SUCCESS);
  for (std::size_t i = 0; i < live.size(); ++i) {
    unsigned char first = 0, last = 0;
    ASSERT_EQ(drv().cuMemcpyDtoH_v2(&first, live[i].first, 1), CUDA_SUCCESS);
    ASSERT_EQ(drv().cuMemcpyDtoH_v2(&last, live[i].first + live[i].second - 1, 1), CUDA_SUCCESS);
    EXPECT_EQ(first, static_cast<unsigned char>(i + 1));
    EXPECT_EQ(last, static_cast<unsigned char>(i + 1));
  }
  for (const auto& [p, n] : live) this->allocator->deallocate(p);
}

// Freed neighbours merge: three blocks freed make room for one of their total size, with no growth.
TYPED_TEST(Baseline, FreedNeighboursServeALargerRequest) {
  const CUdeviceptr a = this->allocate(4 * kMiB), b = this->allocate(4 * kMiB), c = this->allocate(4 * kMiB);
  const std::uint64_t reserved = this->allocator->reserved();
  this->allocator->deallocate(b);
  this->allocator->deallocate(a);
  this->allocator->deallocate(c);
  const CUdeviceptr d = this->allocate(12 * kMiB);
  EXPECT_EQ(this->allocator->reserved(), reserved);
  EXPECT_EQ(d, std::min({a, b, c}));
  this->allocator->deallocate(d);
}

// The expandable kind maps 20 MiB pages at the end of its mapped part, counting the free block it
// ends in: 30 MiB takes two pages; 15 MiB more, with 10 MiB free at the end, one more, right after.
TEST(ExpandableSegmentsModel, GrowsByPagesAtTheEnd) {
  ExpandableSegments es(drv(), device().device, device().total_memory);
  CUdeviceptr a = 0, b = 0, small = 0;
  ASSERT_EQ(es.allocate(&a, 30 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(es.pages(), 2u);
  EXPECT_EQ(es.reserved(), 40 * kMiB);
  ASSERT_EQ(es.allocate(&b, 15 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(b, a + 30 * kMiB);
  EXPECT_EQ(es.pages(), 3u);
  EXPECT_EQ(es.reserved(), 60 * kMiB);
  ASSERT_EQ(es.allocate(&small, 1000), CUDA_SUCCESS);  // small requests have their own 2 MiB pages
  EXPECT_EQ(es.reserved(), 62 * kMiB);
  es.deallocate(a);
  CUdeviceptr c = 0;
  ASSERT_EQ(es.allocate(&c, 20 * kMiB), CUDA_SUCCESS);  // best fit: the 30 MiB hole, no growth
  EXPECT_EQ(c, a);
  EXPECT_EQ(es.peak_reserved(), 62 * kMiB);
}

}  // namespace
}  // namespace uvmpool::bench
