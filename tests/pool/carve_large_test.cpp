// Cached mappings of kDirectBins (512) chunks and more share one ordered bin (DevicePool::big_bin_):
// they are cut and joined like the others (src/pool/cached_ranges.cpp). On a 2 GiB device, so that a
// 512-chunk mapping fits beside the context. A fresh 512-chunk mapping is made of extents (32 MiB),
// so the cut falls between two of them.
#include "pool_test.h"

namespace pooltest {
namespace {

using CarveLarge = PoolTest;

TEST_F(CarveLarge, AMappingOfTheLargestBinIsCutAndJoinedBack) {
  auto pool = make_pool();
  const CUdeviceptr whole = must_allocate(*pool, 512 * gran);
  must_free(*pool, whole);
  sim().reset_counts();
  const std::size_t first = 3 * (32 * kMiB) / gran;  // three extents
  const CUdeviceptr a = must_allocate(*pool, first * gran);
  const CUdeviceptr b = must_allocate(*pool, (512 - first) * gran);
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(a, whole);
  EXPECT_EQ(b, whole + first * gran);
  fill(a, first * gran, 1);
  fill(b, (512 - first) * gran, 2);
  EXPECT_TRUE(holds(a, first * gran, 1));
  EXPECT_TRUE(holds(b, (512 - first) * gran, 2));
  must_free(*pool, a);
  must_free(*pool, b);
  EXPECT_EQ(must_allocate(*pool, 512 * gran), whole) << "joined back into the largest bin's size";
  EXPECT_EQ(vmm_build_calls(), 0u);
}

}  // namespace
}  // namespace pooltest
