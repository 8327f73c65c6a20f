// Parsers for the text of one setting, by type. Internal to config/ (and its tests): they say only
// whether the text is valid; options.cpp turns a refusal into the user-facing error line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "config/options.h"

namespace uvmpool::config {

// The text without leading and trailing blanks (spaces, tabs, newlines).
std::string_view trim(std::string_view text);

// 1/0, true/false, yes/no, on/off, any case.
std::optional<bool> parse_bool(std::string_view text);

// A decimal integer, optionally negative; nothing else on the line.
std::optional<std::int64_t> parse_int(std::string_view text);

// A byte count: integer or decimal number, then an optional unit K, M, G or T (binary: 1K = 1024),
// also written KB/KiB, ..., or B for bytes; any case. Decimals are rounded down to whole bytes.
// With allow_percent, also "NN%" or "NN.N%" with 0 < NN <= 100.
std::optional<Size> parse_size(std::string_view text, bool allow_percent);

// A finite decimal number greater than 0 ("55.5", "4494", "1e3"); nothing else on the line.
std::optional<double> parse_rate(std::string_view text);

// trace, debug, info, warn (or warning), error, off; any case.
std::optional<LogLevel> parse_log_level(std::string_view text);

// Edits (insert, delete, substitute, swap two neighbours) that turn a into b, ignoring case.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace uvmpool::config
