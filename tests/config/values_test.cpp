// The parsers of single values: every accepted spelling, and the ones that must be refused.
#include "config/values.h"

#include <gtest/gtest.h>

namespace uvmpool::config {
namespace {

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

std::uint64_t bytes(std::string_view text) {
  auto size = parse_size(text, /*allow_percent=*/false);
  EXPECT_TRUE(size.has_value()) << "'" << text << "' was refused";
  return size ? size->bytes : 0;
}

bool refused(std::string_view text, bool allow_percent = false) { return !parse_size(text, allow_percent).has_value(); }

TEST(Bool, AcceptsEveryTrueAndFalseSpellingInAnyCase) {
  for (auto text : {"1", "true", "TRUE", "yes", "Yes", "on", "ON", " on "}) EXPECT_EQ(parse_bool(text), true) << text;
  for (auto text : {"0", "false", "False", "no", "NO", "off", "Off"}) EXPECT_EQ(parse_bool(text), false) << text;
}

TEST(Bool, RefusesOtherWords) {
  for (auto text : {"2", "-1", "y", "n", "enable", "truee", "", "o n"}) EXPECT_FALSE(parse_bool(text)) << text;
}

TEST(Int, AcceptsDecimalIntegersWithSurroundingBlanks) {
  EXPECT_EQ(parse_int("4"), 4);
  EXPECT_EQ(parse_int(" 16\t"), 16);
  EXPECT_EQ(parse_int("-3"), -3);
  EXPECT_EQ(parse_int("9223372036854775807"), INT64_MAX);
}

TEST(Int, RefusesFractionsHexUnitsGarbageAndOverflow) {
  for (auto text : {"", "1.5", "0x10", "4K", "four", "1 2", "+", "-", "9223372036854775808"}) {
    EXPECT_FALSE(parse_int(text)) << text;
  }
}

TEST(Size, BareNumberAndBAreBytes) {
  EXPECT_EQ(bytes("0"), 0u);
  EXPECT_EQ(bytes("4096"), 4096u);
  EXPECT_EQ(bytes("4096B"), 4096u);
  EXPECT_EQ(bytes("18446744073709551615"), UINT64_MAX);
}

TEST(Size, UnitsAreBinaryInEverySpellingAndCase) {
  EXPECT_EQ(bytes("1K"), KiB);
  EXPECT_EQ(bytes("1KB"), KiB);
  EXPECT_EQ(bytes("1KiB"), KiB);
  EXPECT_EQ(bytes("1k"), KiB);
  EXPECT_EQ(bytes("512M"), 512 * MiB);
  EXPECT_EQ(bytes("512mib"), 512 * MiB);
  EXPECT_EQ(bytes("4G"), 4 * GiB);
  EXPECT_EQ(bytes("4GB"), 4 * GiB);
  EXPECT_EQ(bytes("2T"), 2 * TiB);
  EXPECT_EQ(bytes("2TiB"), 2 * TiB);
}

TEST(Size, DecimalsScaleByTheUnitAndRoundDownToWholeBytes) {
  EXPECT_EQ(bytes("1.5T"), TiB + TiB / 2);
  EXPECT_EQ(bytes("0.5K"), 512u);
  EXPECT_EQ(bytes("2.25G"), 2 * GiB + GiB / 4);
  EXPECT_EQ(bytes("1.3K"), 1331u);  // 1331.2 bytes
  EXPECT_EQ(bytes("1.9"), 1u);
  EXPECT_EQ(bytes("0.000000000000000000001T"), 0u);
}

TEST(Size, BlanksAroundNumberAndUnitAreIgnored) {
  EXPECT_EQ(bytes("  8G  "), 8 * GiB);
  EXPECT_EQ(bytes("8 GiB"), 8 * GiB);
  EXPECT_EQ(bytes("\t64K\n"), 64 * KiB);
}

TEST(Size, RefusesNegativeEmptyNumberAndGarbage) {
  for (auto text : {"", "   ", "-1", "-1G", "+1G", "G", "KiB", ".5G", "1.G", "1..5G", "1.5.2G", "12X", "4 G B", "4GG",
                    "4Gi", "1P", "1E", "0x10", "four", "1,5G", "1e3", "G4"}) {
    EXPECT_TRUE(refused(text)) << text;
  }
}

TEST(Size, RefusesValuesBeyond64Bits) {
  EXPECT_TRUE(refused("18446744073709551616"));
  EXPECT_TRUE(refused("16777216T"));  // exactly 2^64
  EXPECT_EQ(bytes("16777215T"), 16777215 * TiB);
  EXPECT_TRUE(refused("17179869184G"));
  EXPECT_TRUE(refused("16777216.0T"));
  EXPECT_EQ(bytes("16777215.99999999999999999999999T"), UINT64_MAX);  // just below 2^64, rounded down
  EXPECT_TRUE(refused("99999999999999999999K"));  // the number itself exceeds 64 bits
}

TEST(Size, PercentIsRefusedWhereNotAllowed) {
  EXPECT_TRUE(refused("50%"));
  EXPECT_TRUE(refused("100%"));
}

TEST(SizeOrPercent, AcceptsWholeAndDecimalPercentagesUpTo100) {
  auto p = parse_size("90%", true);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->is_percent);
  EXPECT_DOUBLE_EQ(p->percent, 90.0);
  EXPECT_EQ(p->resolve(1000), 900u);

  auto q = parse_size(" 12.5 % ", true);
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->percent, 12.5);
  EXPECT_EQ(q->resolve(8 * GiB), GiB);

  EXPECT_DOUBLE_EQ(parse_size("100%", true)->percent, 100.0);
  EXPECT_DOUBLE_EQ(parse_size("0.1%", true)->percent, 0.1);
}

TEST(SizeOrPercent, StillAcceptsPlainSizes) {
  auto s = parse_size("4G", true);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->is_percent);
  EXPECT_EQ(s->bytes, 4 * GiB);
  EXPECT_EQ(s->resolve(123), 4 * GiB);
}

TEST(SizeOrPercent, RefusesZeroOverHundredNegativeAndMalformedPercentages) {
  for (auto text : {"0%", "0.0%", "100.1%", "101%", "-5%", "%", " %", "5G%", "1e2%", "inf%", "nan%", "50%%", ".5%", "5.%"}) {
    EXPECT_TRUE(refused(text, true)) << text;
  }
}

TEST(LogLevel, AcceptsEveryLevelInAnyCaseAndWarningForWarn) {
  EXPECT_EQ(parse_log_level("trace"), LogLevel::trace);
  EXPECT_EQ(parse_log_level("DEBUG"), LogLevel::debug);
  EXPECT_EQ(parse_log_level("Info"), LogLevel::info);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::warn);
  EXPECT_EQ(parse_log_level(" error "), LogLevel::error);
  EXPECT_EQ(parse_log_level("OFF"), LogLevel::off);
}

TEST(LogLevel, RefusesOtherWords) {
  for (auto text : {"", "verbose", "critical", "err", "2", "warnings"}) EXPECT_FALSE(parse_log_level(text)) << text;
}

TEST(EditDistance, CountsInsertionsDeletionsSubstitutionsAndNeighbourSwapsIgnoringCase) {
  EXPECT_EQ(edit_distance("LOG_LEVEL", "LOG_LEVEL"), 0u);
  EXPECT_EQ(edit_distance("LOG_LEVLE", "LOG_LEVEL"), 1u);  // swap
  EXPECT_EQ(edit_distance("LOGLEVEL", "LOG_LEVEL"), 1u);   // insertion
  EXPECT_EQ(edit_distance("STATSS", "STATS"), 1u);         // deletion
  EXPECT_EQ(edit_distance("STATZ", "STATS"), 1u);          // substitution
  EXPECT_EQ(edit_distance("log_level", "LOG_LEVEL"), 0u);
  EXPECT_EQ(edit_distance("", "ABC"), 3u);
  EXPECT_EQ(edit_distance("FOO", "STATS"), 5u);
}

}  // namespace
}  // namespace uvmpool::config

namespace uvmpool::config {
namespace {

TEST(Rate, AcceptsPositiveDecimals) {
  EXPECT_EQ(parse_rate("55.5"), 55.5);
  EXPECT_EQ(parse_rate(" 4494 "), 4494.0);
  EXPECT_EQ(parse_rate("1e3"), 1000.0);
}

TEST(Rate, RefusesZeroNegativeInfiniteAndGarbage) {
  for (const char* text : {"0", "-1", "inf", "nan", "", "55.5GB", "fast"}) EXPECT_FALSE(parse_rate(text)) << text;
}

}  // namespace
}  // namespace uvmpool::config
