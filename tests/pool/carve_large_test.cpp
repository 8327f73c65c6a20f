// Cached mappings of kDirectBins (512) chunks and more share one ordered bin (DevicePool::big_bin_):
// they are cut and joined like the others (src/pool/cached_ranges.cpp). On a 2 GiB device, so that a
// 512-chunk mapping fits beside the context.
#include "pool_test.h"

namespace pooltest {
namespace {

using CarveLarge = PoolTest;

TEST_F(CarveLarge, AMappingOfTheLargestBinIsCutAndJoinedBack) {
  auto pool = make_pool();
  const CUdeviceptr whole = must_allocate(*pool, 512 * gran);
  must_free(*pool, whole);
  sim().reset_counts();
  const CUdeviceptr a = must_allocate(*pool, 100 * gran);
  const CUdeviceptr b = must_allocate(*pool, 412 * gran);
  EXPECT_EQ(vmm_build_calls(), 0u);
  EXPECT_EQ(a, whole);
  EXPECT_EQ(b, whole + 100 * gran);
  fill(a, 100 * gran, 1);
  fill(b, 412 * gran, 2);
  EXPECT_TRUE(holds(a, 100 * gran, 1));
  EXPECT_TRUE(holds(b, 412 * gran, 2));
  must_free(*pool, a);
  must_free(*pool, b);
  EXPECT_EQ(must_allocate(*pool, 512 * gran), whole) << "joined back into the largest bin's size";
  EXPECT_EQ(vmm_build_calls(), 0u);
}

}  // namespace
}  // namespace pooltest
