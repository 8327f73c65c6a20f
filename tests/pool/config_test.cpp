// PoolConfig::from_options: UVMPOOL_DEVICE_LIMIT and UVMPOOL_DEVICE_HEADROOM reach the pool.
#include "config/options.h"
#include "pool_test.h"

namespace pooltest {
namespace {

PoolConfig config_of(const uvmpool::config::Environment& env) {
  const uvmpool::config::ParseResult parsed = uvmpool::config::parse(env);
  EXPECT_TRUE(parsed.errors.empty()) << parsed.errors.front();
  return PoolConfig::from_options(parsed.options);
}

TEST(PoolConfigFromOptions, DeviceLimitAsAPercentage) {
  const PoolConfig c = config_of({{"UVMPOOL_DEVICE_LIMIT", "40%"}, {"UVMPOOL_DEVICE_HEADROOM", "128M"}});
  EXPECT_TRUE(c.device_limit.is_percent);
  EXPECT_DOUBLE_EQ(c.device_limit.percent, 40.0);
  EXPECT_EQ(c.device_limit.resolve(1000), 400u);
  EXPECT_EQ(c.headroom, 128ull << 20);
}

TEST(PoolConfigFromOptions, DeviceLimitInBytes) {
  const PoolConfig c = config_of({{"UVMPOOL_DEVICE_LIMIT", "3G"}, {"UVMPOOL_DEVICE_HEADROOM", "0"}});
  EXPECT_FALSE(c.device_limit.is_percent);
  EXPECT_EQ(c.device_limit.resolve(std::uint64_t{80} << 30), std::uint64_t{3} << 30);
  EXPECT_EQ(c.headroom, 0u);
}

TEST(PoolConfigFromOptions, DefaultsLetThePoolUseTheWholeDevice) {
  const PoolConfig c = config_of({});
  EXPECT_EQ(c.device_limit.resolve(std::uint64_t{80} << 30), std::uint64_t{80} << 30);
  EXPECT_EQ(c.small_max, PoolConfig{}.small_max);
  EXPECT_EQ(c.chunk_size, 0u);
}

}  // namespace
}  // namespace pooltest
