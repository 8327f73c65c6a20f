// uvmpool's settings: one table (options.def), parsed once from the environment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/options.def"

namespace uvmpool::config {

enum class LogLevel { trace, debug, info, warn, error, off };

// A size in bytes, or a share of a total (device memory) when the option allows percentages.
struct Size {
  std::uint64_t bytes = 0;
  double percent = 0;  // 0..100, meaningful only when is_percent
  bool is_percent = false;
  // Bytes this size stands for, given the total a percentage refers to.
  std::uint64_t resolve(std::uint64_t total) const {
    return is_percent ? static_cast<std::uint64_t>(static_cast<double>(total) * percent / 100.0) : bytes;
  }
};

using Bool = bool;
using Int = std::int64_t;
using SizeOrPercent = Size;
using Path = std::string;
// A rate in GB/s (10^9 bytes per second): a positive decimal number.
using Rate = double;
// A duration in nanoseconds: a whole number, 0 or more.
struct Nanos {
  std::uint64_t ns = 0;
};
using String = std::string;

// One field per row of the table, named by its `field` column, holding the parsed value.
struct Options {
#define UVMPOOL_X(NAME, field, Type, def, help) Type field{};
  UVMPOOL_OPTIONS(UVMPOOL_X)
#undef UVMPOOL_X
};

enum class Type { Bool, Int, Size, SizeOrPercent, Path, String, LogLevel, Rate, Nanos };

struct OptionInfo {
  const char* name;
  const char* field;
  Type type;
  const char* default_value;
  const char* help;
};
extern const OptionInfo kOptionTable[];
extern const std::size_t kOptionCount;

using Environment = std::vector<std::pair<std::string, std::string>>;

struct ParseResult {
  Options options;                    // defaults where a value was missing or malformed
  std::vector<std::string> errors;    // one line each: variable, value, accepted form
  std::vector<std::string> warnings;  // unknown UVMPOOL_* variables, each naming the nearest known one
};

// Parses the given variables (only UVMPOOL_* ones are looked at). Never prints, never exits.
ParseResult parse(const Environment& env);

// The process environment as an Environment.
Environment process_environment();

// The options of this process, parsed once (thread-safe) from the environment. A malformed value
// prints its error line to stderr and ends the process with status 2: running on with a setting
// the user did not mean is worse than stopping. Prints no warnings (see report_warnings).
const Options& options();

// Prints the warnings about unknown UVMPOOL_* variables, once per process (libuvmpool.so calls it
// at load; the simulated driver does not, so nothing is said twice).
void report_warnings();

// The accepted form of a type, as used in error messages and docs ("a size such as 512M or 4G").
std::string_view accepted_form(Type type);

// The type's name in the docs' table: "boolean", "size or percentage", ...
std::string_view type_name(Type type);

// The table as the Markdown that docs/configuration.md embeds between its marker comments.
std::string markdown_table();

}  // namespace uvmpool::config
