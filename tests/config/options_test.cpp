// parse(): the table read from a given environment, with its error lines and warnings.
#include "config/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace uvmpool::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::uint64_t MiB = 1024 * 1024, GiB = 1024 * MiB;

ParseResult parse_one(const char* name, const char* value) { return parse({{name, value}}); }

TEST(Parse, EmptyEnvironmentGivesEveryDefaultWithoutErrorsOrWarnings) {
  ParseResult r = parse({});
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_THAT(r.warnings, IsEmpty());
  EXPECT_FALSE(r.options.disable);
  EXPECT_EQ(r.options.driver_path, "");
  EXPECT_EQ(r.options.log_level, LogLevel::warn);
  EXPECT_EQ(r.options.log_file, "");
  EXPECT_FALSE(r.options.stats);
  EXPECT_EQ(r.options.sim_devices, 1);
  EXPECT_EQ(r.options.sim_device_memory.bytes, 8 * GiB);
  EXPECT_EQ(r.options.sim_host_memory.bytes, 16 * GiB);
  EXPECT_EQ(r.options.sim_granularity.bytes, 2 * MiB);
  EXPECT_EQ(r.options.sim_fail, "");
}

TEST(Parse, VariablesOutsideUvmpoolAreIgnored) {
  ParseResult r = parse({{"PATH", "/bin"}, {"LOG_LEVEL", "nonsense"}, {"uvmpool_stats", "1"}});
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_THAT(r.warnings, IsEmpty());
  EXPECT_FALSE(r.options.stats);
}

TEST(Parse, SetValuesOfEveryTypeReplaceTheDefaults) {
  ParseResult r = parse({{"UVMPOOL_DISABLE", "yes"},
                         {"UVMPOOL_DRIVER_PATH", "/opt/cuda/libcuda.so.1"},
                         {"UVMPOOL_LOG_LEVEL", "Debug"},
                         {"UVMPOOL_LOG_FILE", "relative/log.txt"},
                         {"UVMPOOL_STATS", "on"},
                         {"UVMPOOL_SIM_DEVICES", "16"},
                         {"UVMPOOL_SIM_DEVICE_MEMORY", "1.5G"},
                         {"UVMPOOL_SIM_HOST_MEMORY", "512MiB"},
                         {"UVMPOOL_SIM_GRANULARITY", "64K"},
                         {"UVMPOOL_SIM_FAIL", " cuMemCreate:3 "}});
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_TRUE(r.options.disable);
  EXPECT_EQ(r.options.driver_path, "/opt/cuda/libcuda.so.1");
  EXPECT_EQ(r.options.log_level, LogLevel::debug);
  EXPECT_EQ(r.options.log_file, "relative/log.txt");
  EXPECT_TRUE(r.options.stats);
  EXPECT_EQ(r.options.sim_devices, 16);
  EXPECT_EQ(r.options.sim_device_memory.bytes, GiB + GiB / 2);
  EXPECT_FALSE(r.options.sim_device_memory.is_percent);
  EXPECT_EQ(r.options.sim_host_memory.bytes, 512 * MiB);
  EXPECT_EQ(r.options.sim_granularity.bytes, 64 * 1024u);
  EXPECT_EQ(r.options.sim_fail, " cuMemCreate:3 ") << "strings are taken as given";
}

TEST(Parse, BlankValueKeepsTheDefault) {
  ParseResult r = parse({{"UVMPOOL_STATS", ""}, {"UVMPOOL_SIM_DEVICES", " "}, {"UVMPOOL_SIM_DEVICE_MEMORY", ""},
                         {"UVMPOOL_LOG_LEVEL", ""}});
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_FALSE(r.options.stats);
  EXPECT_EQ(r.options.sim_devices, 1);
  EXPECT_EQ(r.options.sim_device_memory.bytes, 8 * GiB);
  EXPECT_EQ(r.options.log_level, LogLevel::warn);
}

TEST(Parse, FirstOccurrenceOfARepeatedVariableWinsLikeGetenv) {
  ParseResult r = parse({{"UVMPOOL_SIM_DEVICES", "3"}, {"UVMPOOL_SIM_DEVICES", "5"}});
  EXPECT_EQ(r.options.sim_devices, 3);
}

TEST(ParseErrors, MalformedSizeNamesVariableValueAndAcceptedFormAndKeepsDefault) {
  ParseResult r = parse_one("UVMPOOL_SIM_DEVICE_MEMORY", "12X");
  EXPECT_THAT(r.errors, ElementsAre("uvmpool: UVMPOOL_SIM_DEVICE_MEMORY='12X' is not valid: expected a size such as "
                                    "512M, 4G or 1.5T"));
  EXPECT_EQ(r.options.sim_device_memory.bytes, 8 * GiB);
}

TEST(ParseErrors, PercentIsRefusedForAPlainSizeOption) {
  ParseResult r = parse_one("UVMPOOL_SIM_HOST_MEMORY", "50%");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("UVMPOOL_SIM_HOST_MEMORY='50%'"));
  EXPECT_FALSE(r.options.sim_host_memory.is_percent);
  EXPECT_EQ(r.options.sim_host_memory.bytes, 16 * GiB);
}

TEST(ParseErrors, NegativeAndOverflowingSizesAreRefused) {
  EXPECT_EQ(parse_one("UVMPOOL_SIM_DEVICE_MEMORY", "-1G").errors.size(), 1u);
  EXPECT_EQ(parse_one("UVMPOOL_SIM_DEVICE_MEMORY", "16777216T").errors.size(), 1u);
  EXPECT_EQ(parse_one("UVMPOOL_SIM_DEVICE_MEMORY", "M").errors.size(), 1u);
}

TEST(ParseErrors, EveryTypeReportsItsAcceptedForm) {
  EXPECT_THAT(parse_one("UVMPOOL_STATS", "maybe").errors,
              ElementsAre("uvmpool: UVMPOOL_STATS='maybe' is not valid: expected 1, 0, true, false, yes, no, on or off"));
  EXPECT_THAT(parse_one("UVMPOOL_LOG_LEVEL", "loud").errors,
              ElementsAre("uvmpool: UVMPOOL_LOG_LEVEL='loud' is not valid: expected trace, debug, info, warn, error or off"));
  EXPECT_THAT(parse_one("UVMPOOL_SIM_DEVICES", "two").errors,
              ElementsAre("uvmpool: UVMPOOL_SIM_DEVICES='two' is not valid: expected a whole number from 1 to 16"));
}

TEST(ParseErrors, GuardIsABooleanAndAnythingElseIsRefusedKeepingItOff) {
  ParseResult r = parse_one("UVMPOOL_GUARD", "maybe");
  EXPECT_THAT(r.errors,
              ElementsAre("uvmpool: UVMPOOL_GUARD='maybe' is not valid: expected 1, 0, true, false, yes, no, on or off"));
  EXPECT_FALSE(r.options.guard);
  EXPECT_FALSE(parse_one("UVMPOOL_GUARD", "").options.guard) << "off by default";
  r = parse_one("UVMPOOL_GUARD", " On ");
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.options.guard);
}

TEST(ParseErrors, SimDevicesMustBeFrom1To16) {
  for (auto bad : {"0", "17", "-1", "1.5"}) {
    ParseResult r = parse_one("UVMPOOL_SIM_DEVICES", bad);
    EXPECT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_EQ(r.options.sim_devices, 1) << bad;
  }
  EXPECT_THAT(parse_one("UVMPOOL_SIM_DEVICES", "1").errors, IsEmpty());
  EXPECT_THAT(parse_one("UVMPOOL_SIM_DEVICES", "16").errors, IsEmpty());
}

TEST(ParseErrors, SimulatedRatesArePositiveAndDurationsWholeAndNotNegative) {
  const ParseResult ok = parse({{"UVMPOOL_SIM_COPY_GBPS", "12.5"}, {"UVMPOOL_SIM_LAUNCH_NS", "0"}});
  EXPECT_TRUE(ok.errors.empty());
  EXPECT_EQ(ok.options.sim_copy_gbps, 12.5);
  EXPECT_EQ(ok.options.sim_launch_ns.ns, 0u);
  const ParseResult bad = parse({{"UVMPOOL_SIM_COPY_GBPS", "0"}, {"UVMPOOL_SIM_LAUNCH_NS", "-5"},
                                 {"UVMPOOL_SIM_KERNEL_NS", "2.5"}, {"UVMPOOL_SIM_HANG_TIMEOUT_MS", "700000"}});
  ASSERT_EQ(bad.errors.size(), 4u);
  EXPECT_THAT(bad.errors[0], HasSubstr("UVMPOOL_SIM_COPY_GBPS='0'"));
  EXPECT_THAT(bad.errors[0], HasSubstr("GB/s"));
  EXPECT_EQ(bad.options.sim_copy_gbps, 55.5);  // the default stays
  EXPECT_EQ(bad.options.sim_launch_ns.ns, 4000u);
}

TEST(ParseErrors, GranularityMustBeAPowerOfTwoOfAtLeast4096) {
  for (auto bad : {"2048", "0", "3M", "6K", "1.5M"}) {
    ParseResult r = parse_one("UVMPOOL_SIM_GRANULARITY", bad);
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("expected a power of two of at least 4K")) << bad;
    EXPECT_EQ(r.options.sim_granularity.bytes, 2 * MiB) << bad;
  }
  EXPECT_EQ(parse_one("UVMPOOL_SIM_GRANULARITY", "4096").options.sim_granularity.bytes, 4096u);
  EXPECT_EQ(parse_one("UVMPOOL_SIM_GRANULARITY", "1G").options.sim_granularity.bytes, GiB);
}

// Issue 17: 1T was accepted and then every allocation failed; past 2^63 it was undefined behaviour.
TEST(ParseErrors, ChunkSizeIsZeroOrFrom4KTo1G) {
  for (auto bad : {"1T", "2G", "1025M", "2048", "16777215T", "18446744073709551615"}) {
    ParseResult r = parse_one("UVMPOOL_CHUNK_SIZE", bad);
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("UVMPOOL_CHUNK_SIZE")) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("from 4K to 1G")) << bad;
    EXPECT_EQ(r.options.chunk_size.bytes, 0u) << bad;
  }
  EXPECT_EQ(parse_one("UVMPOOL_CHUNK_SIZE", "0").options.chunk_size.bytes, 0u);
  EXPECT_EQ(parse_one("UVMPOOL_CHUNK_SIZE", "4K").options.chunk_size.bytes, 4096u);
  EXPECT_EQ(parse_one("UVMPOOL_CHUNK_SIZE", "1G").options.chunk_size.bytes, GiB);
}

TEST(ParseErrors, ExtentSizeIsZeroOrAPowerOfTwoUpTo1G) {
  for (auto bad : {"48M", "2G", "3000", "1T"}) {
    ParseResult r = parse_one("UVMPOOL_EXTENT_SIZE", bad);
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("UVMPOOL_EXTENT_SIZE")) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("power of two")) << bad;
    EXPECT_EQ(r.options.extent_size.bytes, 32u << 20) << bad << ": the default stays";
  }
  EXPECT_EQ(parse_one("UVMPOOL_EXTENT_SIZE", "0").options.extent_size.bytes, 0u);
  EXPECT_EQ(parse_one("UVMPOOL_EXTENT_SIZE", "8M").options.extent_size.bytes, 8u << 20);
  EXPECT_EQ(parse_one("UVMPOOL_EXTENT_SIZE", "1G").options.extent_size.bytes, GiB);
}

TEST(ParseErrors, CarveGroupIsAWholeNumberOfSlotsFrom1To64) {
  for (auto bad : {"0", "65", "-1", "two"}) {
    ParseResult r = parse_one("UVMPOOL_CARVE_GROUP", bad);
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_THAT(r.errors[0], HasSubstr("UVMPOOL_CARVE_GROUP")) << bad;
    EXPECT_EQ(r.options.carve_group, 4) << bad << ": the default stays";
  }
  EXPECT_EQ(parse_one("UVMPOOL_CARVE_GROUP", "1").options.carve_group, 1);
  EXPECT_EQ(parse_one("UVMPOOL_CARVE_GROUP", "64").options.carve_group, 64);
}

TEST(ParseErrors, TieringCommitIsBesideOrAfter) {
  ParseResult r = parse_one("UVMPOOL_TIERING_COMMIT", "later");
  EXPECT_THAT(r.errors,
              ElementsAre(HasSubstr("UVMPOOL_TIERING_COMMIT='later' is not valid: expected beside or after")));
  EXPECT_EQ(r.options.tiering_commit, "beside") << "the default stays";
  EXPECT_EQ(parse_one("UVMPOOL_TIERING_COMMIT", "after").options.tiering_commit, "after");
}

TEST(ParseErrors, DriverPathMustBeAbsoluteWhenSet) {
  ParseResult r = parse_one("UVMPOOL_DRIVER_PATH", "libcuda.so.1");
  EXPECT_THAT(r.errors, ElementsAre(HasSubstr("UVMPOOL_DRIVER_PATH='libcuda.so.1' is not valid: expected an absolute path")));
  EXPECT_EQ(r.options.driver_path, "");
  EXPECT_THAT(parse_one("UVMPOOL_DRIVER_PATH", "").errors, IsEmpty());
}

TEST(ParseErrors, EachMalformedVariableGetsItsOwnLine) {
  ParseResult r = parse({{"UVMPOOL_STATS", "2"}, {"UVMPOOL_SIM_DEVICES", "99"}, {"UVMPOOL_DISABLE", "1"}});
  EXPECT_EQ(r.errors.size(), 2u);
  EXPECT_TRUE(r.options.disable) << "valid settings are still applied";
}

TEST(UnknownVariables, WarnWithTheNearestKnownName) {
  EXPECT_THAT(parse_one("UVMPOOL_LOG_LEVLE", "info").warnings,
              ElementsAre("uvmpool: unknown setting UVMPOOL_LOG_LEVLE (did you mean UVMPOOL_LOG_LEVEL?)"));
  EXPECT_THAT(parse_one("UVMPOOL_SIM_DEVICE", "2").warnings, ElementsAre(HasSubstr("did you mean UVMPOOL_SIM_DEVICES?")));
  EXPECT_THAT(parse_one("UVMPOOL_LOGFILE", "x").warnings, ElementsAre(HasSubstr("did you mean UVMPOOL_LOG_FILE?")));
  EXPECT_THAT(parse_one("UVMPOOL_Stats", "1").warnings, ElementsAre(HasSubstr("did you mean UVMPOOL_STATS?")));
}

TEST(UnknownVariables, WithNothingCloseSuggestNoNameButPointToTheDocs) {
  ParseResult r = parse_one("UVMPOOL_XYZZY", "1");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("unknown setting UVMPOOL_XYZZY"));
  EXPECT_THAT(r.warnings[0], HasSubstr("docs/configuration.md"));
  EXPECT_THAT(r.warnings[0], ::testing::Not(HasSubstr("did you mean")));
}

TEST(UnknownVariables, DoNotChangeOptionsOrCauseErrors) {
  ParseResult r = parse({{"UVMPOOL_STAT", "1"}, {"UVMPOOL_STAT", "1"}});
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_FALSE(r.options.stats);
  EXPECT_EQ(r.warnings.size(), 1u) << "a repeated variable is warned about once";
}

TEST(Table, HasOneRowPerOptionWithDefaultsThatParse) {
  for (std::size_t i = 0; i < kOptionCount; ++i) {
    const OptionInfo& row = kOptionTable[i];
    EXPECT_EQ(std::strncmp(row.name, "UVMPOOL_", 8), 0) << row.name;
    EXPECT_GT(std::strlen(row.help), 0u) << row.name;
    EXPECT_THAT(parse_one(row.name, row.default_value).errors, IsEmpty()) << row.name;
  }
}

TEST(AcceptedForm, IsGivenForEveryType) {
  for (Type t : {Type::Bool, Type::Int, Type::Size, Type::SizeOrPercent, Type::Path, Type::String, Type::LogLevel, Type::Rate, Type::Nanos}) {
    EXPECT_FALSE(accepted_form(t).empty());
  }
  EXPECT_THAT(std::string(accepted_form(Type::SizeOrPercent)), HasSubstr("%"));
  EXPECT_THAT(std::string(accepted_form(Type::Size)), ::testing::Not(HasSubstr("%")));
}

TEST(MarkdownTable, HasTheHeaderAndARowPerOptionWithDefaultAndAcceptedForm) {
  const std::string table = markdown_table();
  EXPECT_EQ(table.rfind("| Variable | Type | Default | Description |\n|---|---|---|---|\n", 0), 0u);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), static_cast<long>(kOptionCount + 2));
  for (std::size_t i = 0; i < kOptionCount; ++i) EXPECT_THAT(table, HasSubstr(std::string("| `") + kOptionTable[i].name + "` |"));
  EXPECT_THAT(table, HasSubstr("| `UVMPOOL_SIM_DEVICE_MEMORY` | size | `8G` | Simulated driver: memory of each device. "
                               "Accepted: a size such as 512M, 4G or 1.5T. |"));
  EXPECT_THAT(table, HasSubstr("| `UVMPOOL_LOG_FILE` | path | (empty) |"));
  EXPECT_THAT(table, HasSubstr("Accepted: a whole number from 1 to 16."));
}

}  // namespace
}  // namespace uvmpool::config
