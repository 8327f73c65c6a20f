// Limits of single settings beyond their type's syntax (ranges, powers of two, absolute paths):
// the one place where they live. Both parsing and the documentation read them from here.
#pragma once

#include <cstdint>
#include <string_view>

#include "config/options.h"

namespace uvmpool::config {

// The largest chunk (UVMPOOL_CHUNK_SIZE): past it a chunk is a fraction of a device, and every
// allocation would be rounded up to it.
inline constexpr std::uint64_t kMaxChunkSize = std::uint64_t{1} << 30;

struct Limit {
  const char* name;      // the setting's variable
  const char* expected;  // replaces the type's accepted form in error lines and docs
  // The check that applies to the setting's type; the others stay null.
  bool (*int_ok)(Int) = nullptr;
  bool (*size_ok)(const Size&) = nullptr;
  bool (*text_ok)(std::string_view) = nullptr;
};

// The limit of the named setting, or null when it has none.
const Limit* find_limit(std::string_view name);

// What a value of this row must look like: its limit's wording, else its type's accepted form.
std::string_view expected_form(const OptionInfo& row);

}  // namespace uvmpool::config
