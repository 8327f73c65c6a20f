#include "config/options.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "config/limits.h"
#include "config/values.h"

extern char** environ;

namespace uvmpool::config {

#define UVMPOOL_ROW(NAME, field, type, def, help) {#NAME, #field, Type::type, def, help},
const OptionInfo kOptionTable[] = {UVMPOOL_OPTIONS(UVMPOOL_ROW)};
#undef UVMPOOL_ROW
const std::size_t kOptionCount = sizeof(kOptionTable) / sizeof(kOptionTable[0]);

std::string_view accepted_form(Type type) {
  switch (type) {
    case Type::Bool: return "1, 0, true, false, yes, no, on or off";
    case Type::Int: return "a whole number such as 4";
    case Type::Size: return "a size such as 512M, 4G or 1.5T";
    case Type::SizeOrPercent: return "a size such as 512M, 4G or 1.5T, or a share of device memory such as 90%";
    case Type::Path: return "a file path";
    case Type::String: return "any text";
    case Type::LogLevel: return "trace, debug, info, warn, error or off";
    case Type::Rate: return "a rate in GB/s greater than 0, such as 55.5";
    case Type::Nanos: return "a whole number of nanoseconds, 0 or more, such as 2500";
  }
  return "";
}

namespace {

constexpr std::string_view kPrefix = "UVMPOOL_";

// Each read() stores the value of `text` in `out` and returns true, or returns false and leaves `out`
// as it was. Blank text keeps the value (so `UVMPOOL_X= prog` means "the default"), except for
// paths and strings, which are taken exactly as given.
bool read(const OptionInfo& row, std::string_view text, Bool& out) {
  if (trim(text).empty()) return true;
  auto value = parse_bool(text);
  if (value) out = *value;
  return value.has_value();
}

bool read(const OptionInfo& row, std::string_view text, Int& out) {
  if (trim(text).empty()) return true;
  auto value = parse_int(text);
  const Limit* limit = find_limit(row.name);
  if (!value || (limit && limit->int_ok && !limit->int_ok(*value))) return false;
  out = *value;
  return true;
}

bool read(const OptionInfo& row, std::string_view text, Size& out) {
  if (trim(text).empty()) return true;
  auto value = parse_size(text, row.type == Type::SizeOrPercent);
  const Limit* limit = find_limit(row.name);
  if (!value || (limit && limit->size_ok && !limit->size_ok(*value))) return false;
  out = *value;
  return true;
}

bool read(const OptionInfo& row, std::string_view text, std::string& out) {
  const Limit* limit = find_limit(row.name);
  if (limit && limit->text_ok && !limit->text_ok(text)) return false;
  out.assign(text);
  return true;
}

bool read(const OptionInfo& row, std::string_view text, LogLevel& out) {
  if (trim(text).empty()) return true;
  auto value = parse_log_level(text);
  if (value) out = *value;
  return value.has_value();
}

bool read(const OptionInfo& row, std::string_view text, Rate& out) {
  if (trim(text).empty()) return true;
  auto value = parse_rate(text);
  if (value) out = *value;
  return value.has_value();
}

bool read(const OptionInfo& row, std::string_view text, Nanos& out) {
  if (trim(text).empty()) return true;
  auto value = parse_int(text);
  if (!value || *value < 0) return false;
  out.ns = static_cast<std::uint64_t>(*value);
  return true;
}

// The value of the first variable of that name, as getenv would find it.
const std::string* find(const Environment& env, std::string_view name) {
  for (const auto& [key, value] : env) {
    if (key == name) return &value;
  }
  return nullptr;
}

std::string error_line(const OptionInfo& row, std::string_view value) {
  std::string line = "uvmpool: ";
  line.append(row.name).append("='").append(value).append("' is not valid: expected ");
  line.append(expected_form(row));
  return line;
}

template <typename T>
void parse_row(const OptionInfo& row, const Environment& env, T& field, ParseResult& result) {
  if (!read(row, row.default_value, field)) {
    // A wrong default is our bug, not the user's; the tests keep it from shipping.
    result.errors.push_back(error_line(row, row.default_value) + " (the built-in default)");
  }
  if (const std::string* value = find(env, row.name); value && !read(row, *value, field)) {
    result.errors.push_back(error_line(row, *value));
  }
}

bool is_known(std::string_view name) {
  for (const OptionInfo& row : kOptionTable) {
    if (name == row.name) return true;
  }
  return false;
}

// The known setting nearest to `name`, or null when none is close enough to be the one meant.
const char* nearest_setting(std::string_view name) {
  const std::string_view rest = name.substr(kPrefix.size());
  const char* best = nullptr;
  std::size_t best_distance = 0;
  for (const OptionInfo& row : kOptionTable) {
    const std::size_t d = edit_distance(rest, std::string_view(row.name).substr(kPrefix.size()));
    if (!best || d < best_distance) {
      best = row.name;
      best_distance = d;
    }
  }
  // Up to a third of the letters wrong (at least two) still reads as a typo; more is a guess.
  const std::size_t allowed = std::max<std::size_t>(2, rest.size() / 3);
  return best_distance <= allowed ? best : nullptr;
}

std::string unknown_warning(std::string_view name) {
  std::string line = "uvmpool: unknown setting ";
  line.append(name);
  if (const char* nearest = nearest_setting(name)) {
    line.append(" (did you mean ").append(nearest).append("?)");
  } else {
    line.append(" (docs/configuration.md lists the settings)");
  }
  return line;
}

void print_lines(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) {
    std::fputs(line.c_str(), stderr);
    std::fputc('\n', stderr);
  }
  std::fflush(stderr);
}

// The parse of this process's environment, made once. Leaked on purpose: code running during exit
// (destructors, atexit handlers, intercepted calls) may still read the options.
const ParseResult& process_result() {
  static const ParseResult* result = []() -> const ParseResult* {
    try {
      auto* parsed = new ParseResult(parse(process_environment()));
      if (!parsed->errors.empty()) {
        print_lines(parsed->errors);
        _exit(2);
      }
      return parsed;
    } catch (const std::exception& e) {
      // Only allocation can fail here; we cannot run without settings.
      std::fprintf(stderr, "uvmpool: could not read the UVMPOOL_* settings: %s\n", e.what());
      _exit(2);
    }
  }();
  return *result;
}

}  // namespace

ParseResult parse(const Environment& env) {
  ParseResult result;
  std::size_t index = 0;
#define UVMPOOL_PARSE(NAME, field, type, def, help) parse_row(kOptionTable[index++], env, result.options.field, result);
  UVMPOOL_OPTIONS(UVMPOOL_PARSE)
#undef UVMPOOL_PARSE

  for (const auto& [name, value] : env) {
    if (!name.starts_with(kPrefix) || is_known(name)) continue;
    std::string warning = unknown_warning(name);
    bool seen = false;  // a variable listed twice is warned about once
    for (const std::string& w : result.warnings) seen = seen || w == warning;
    if (!seen) result.warnings.push_back(std::move(warning));
  }
  return result;
}

Environment process_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    const std::size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    env.emplace_back(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return env;
}

const Options& options() { return process_result().options; }

void report_warnings() {
  static const bool reported = [] {
    print_lines(process_result().warnings);
    return true;
  }();
  (void)reported;
}

}  // namespace uvmpool::config
