// PoolConfig::from_options: UVMPOOL_DEVICE_LIMIT, UVMPOOL_DEVICE_HEADROOM, UVMPOOL_CARVE_MAX and UVMPOOL_GUARD reach
// the pool.
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

TEST(PoolConfigFromOptions, GuardReachesThePool) {
  EXPECT_TRUE(config_of({{"UVMPOOL_GUARD", "1"}}).guard);
  EXPECT_FALSE(config_of({{"UVMPOOL_GUARD", "off"}}).guard);
}

TEST(PoolConfigFromOptions, CarveMaxReachesThePool) {
  EXPECT_EQ(config_of({{"UVMPOOL_CARVE_MAX", "64M"}}).carve_max, std::size_t{64} << 20);
  EXPECT_EQ(config_of({{"UVMPOOL_CARVE_MAX", "0"}}).carve_max, 0u) << "0 turns carving off";
  EXPECT_EQ(config_of({}).carve_max, std::size_t{4} << 30) << "carving is on by default, up to 4 GiB";
}

TEST(PoolConfigFromOptions, DefaultsLetThePoolUseTheWholeDevice) {
  const PoolConfig c = config_of({});
  EXPECT_EQ(c.device_limit.resolve(std::uint64_t{80} << 30), std::uint64_t{80} << 30);
  EXPECT_EQ(c.chunk_size, 0u);
}

// PoolConfig{} (what tests and benchmarks build on) must hold the defaults of options.def, field by
// field: each is compared with the value the option table's default parses to.
TEST(PoolConfigDefaults, EveryFieldFromAnOptionHoldsThatOptionsDefault) {
  const PoolConfig fresh;
  const PoolConfig from_table = config_of({});
  EXPECT_EQ(fresh.device_limit.is_percent, from_table.device_limit.is_percent);
  EXPECT_DOUBLE_EQ(fresh.device_limit.percent, from_table.device_limit.percent);
  EXPECT_EQ(fresh.device_limit.bytes, from_table.device_limit.bytes);
  EXPECT_EQ(fresh.headroom, from_table.headroom);
  EXPECT_EQ(fresh.chunk_size, from_table.chunk_size);
  EXPECT_EQ(fresh.extent_size, from_table.extent_size);
  EXPECT_EQ(fresh.carve_max, from_table.carve_max);
  EXPECT_EQ(fresh.spill, from_table.spill);
  EXPECT_EQ(fresh.host_limit.is_percent, from_table.host_limit.is_percent);
  EXPECT_DOUBLE_EQ(fresh.host_limit.percent, from_table.host_limit.percent);
  EXPECT_EQ(fresh.host_limit.bytes, from_table.host_limit.bytes);
  EXPECT_EQ(fresh.host_reserve, from_table.host_reserve);
  EXPECT_EQ(fresh.report_host, from_table.report_host);
  EXPECT_EQ(fresh.guard, from_table.guard);
}

// The fields no option sets keep the values docs/architecture.md gives.
TEST(PoolConfigDefaults, FieldsWithoutAnOptionHoldTheDocumentedValues) {
  const PoolConfig fresh;
  EXPECT_EQ(fresh.small_max, std::size_t{1} << 20);  // "Small allocations (up to 1 MiB ...)"
  EXPECT_EQ(fresh.host_idle_ms, 5000u);              // "once no spill has come for 5 s"
  EXPECT_TRUE(fresh.counters);
}

}  // namespace
}  // namespace pooltest
