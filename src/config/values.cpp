#include "config/values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

namespace uvmpool::config {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Bytes per unit, or 0 when the text names no unit we know.
std::uint64_t unit_multiplier(std::string_view unit) {
  struct Unit {
    std::string_view spellings[3];
    int shift;
  };
  static constexpr Unit kUnits[] = {
      {{"B", "B", "B"}, 0},       {{"K", "KB", "KiB"}, 10}, {{"M", "MB", "MiB"}, 20},
      {{"G", "GB", "GiB"}, 30}, {{"T", "TB", "TiB"}, 40},
  };
  if (unit.empty()) return 1;
  for (const Unit& u : kUnits) {
    for (std::string_view spelling : u.spellings) {
      if (equals_ignoring_case(unit, spelling)) return std::uint64_t{1} << u.shift;
    }
  }
  return 0;
}

// "digits" or "digits.digits" at the start of text; returns its length, or 0 when there is none.
std::size_t number_length(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && is_digit(text[i])) ++i;
  if (i == 0) return 0;
  if (i < text.size() && text[i] == '.') {
    std::size_t j = i + 1;
    while (j < text.size() && is_digit(text[j])) ++j;
    if (j == i + 1) return 0;  // "1." is more likely a typo than a number
    i = j;
  }
  return i;
}

std::optional<Size> parse_percent(std::string_view text) {
  std::string_view number = trim(text.substr(0, text.size() - 1));  // without the '%'
  if (number.empty() || number_length(number) != number.size()) return std::nullopt;
  double percent = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), percent, std::chars_format::fixed);
  if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
  if (!(percent > 0 && percent <= 100)) return std::nullopt;
  Size size;
  size.is_percent = true;
  size.percent = percent;
  return size;
}

}  // namespace

std::string_view trim(std::string_view text) {
  constexpr std::string_view kBlanks = " \t\n\r\f\v";
  const auto first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

std::optional<bool> parse_bool(std::string_view text) {
  text = trim(text);
  for (std::string_view yes : {"1", "true", "yes", "on"}) {
    if (equals_ignoring_case(text, yes)) return true;
  }
  for (std::string_view no : {"0", "false", "no", "off"}) {
    if (equals_ignoring_case(text, no)) return false;
  }
  return std::nullopt;
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  text = trim(text);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_rate(std::string_view text) {
  text = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (!std::isfinite(value) || value <= 0) return std::nullopt;
  return value;
}

std::optional<Size> parse_size(std::string_view text, bool allow_percent) {
  text = trim(text);
  if (allow_percent && !text.empty() && text.back() == '%') return parse_percent(text);

  const std::size_t length = number_length(text);
  if (length == 0) return std::nullopt;  // empty, negative, or no digits before the unit
  const std::string_view number = text.substr(0, length);
  const std::uint64_t multiplier = unit_multiplier(trim(text.substr(length)));
  if (multiplier == 0) return std::nullopt;

  const std::size_t point = number.find('.');
  const std::string_view whole_digits = number.substr(0, point);
  std::uint64_t whole = 0;
  if (std::from_chars(whole_digits.data(), whole_digits.data() + whole_digits.size(), whole).ec != std::errc()) {
    return std::nullopt;  // more than 2^64 - 1 before the unit is applied
  }
  // 128-bit arithmetic so that overflow past 2^64 - 1 is seen, not wrapped around.
  unsigned __int128 bytes = static_cast<unsigned __int128>(whole) * multiplier;
  if (point != std::string_view::npos) {
    // The fraction as digits / 10^count, exact up to 18 digits; later digits are below a byte
    // for every unit we have and would only be rounded away.
    std::string_view fraction = number.substr(point + 1).substr(0, 18);
    std::uint64_t digits = 0, scale = 1;
    for (char c : fraction) {
      digits = digits * 10 + static_cast<std::uint64_t>(c - '0');
      scale *= 10;
    }
    bytes += static_cast<unsigned __int128>(digits) * multiplier / scale;
  }
  if (bytes > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  Size size;
  size.bytes = static_cast<std::uint64_t>(bytes);
  return size;
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  text = trim(text);
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::trace}, {"debug", LogLevel::debug}, {"info", LogLevel::info},   {"warn", LogLevel::warn},
      {"warning", LogLevel::warn}, {"error", LogLevel::error}, {"off", LogLevel::off},
  };
  for (const auto& [name, level] : kNames) {
    if (equals_ignoring_case(text, name)) return level;
  }
  return std::nullopt;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus swaps of neighbours, the most common typo (LEVLE).
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(n, m);
}

}  // namespace uvmpool::config
