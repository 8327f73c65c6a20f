// libFuzzer target: the option parser (src/config) on arbitrary settings. The input is lines of
// NAME=VALUE (a line without '=' is a value for UVMPOOL_DEVICE_LIMIT, so bare values are fuzzed too);
// each value also goes through every value parser on its own. Nothing may crash, throw or read out of
// bounds, and what parses must be consistent (below). Seeds: tests/fuzz/options_corpus/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/options.h"
#include "config/values.h"

using namespace uvmpool::config;

namespace {
void check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("invariant broken: %s\n", what);
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Environment env;
  for (std::size_t start = 0; start <= input.size();) {
    const std::size_t end = std::min(input.find('\n', start), input.size());
    const std::string_view line = input.substr(start, end - start);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      env.emplace_back("UVMPOOL_DEVICE_LIMIT", std::string(line));
    else
      env.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));

    const std::string_view value = eq == std::string_view::npos ? line : line.substr(eq + 1);
    (void)parse_bool(value);
    (void)parse_int(value);
    (void)parse_rate(value);
    (void)parse_log_level(value);
    if (auto s = parse_size(value, true); s && s->is_percent) {
      check(s->percent >= 0 && s->percent <= 100, "a share outside 0..100%");
      check(s->resolve(1ull << 40) <= (1ull << 40), "a share of a total larger than the total");
    }
    if (auto s = parse_size(value, false); s) check(!s->is_percent, "a share where none is allowed");
    check(trim(value).size() <= value.size(), "trim grew the text");
    (void)edit_distance(value.substr(0, 64), "UVMPOOL_DEVICE_LIMIT");
    start = end + 1;
  }
  const ParseResult r = parse(env);
  check(r.errors.size() <= env.size(), "more errors than settings");
  return 0;
}
