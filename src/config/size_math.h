// Size arithmetic that cannot wrap: every sum or product of byte counts that a setting or a request
// can make large (limits, budgets, chunk counts) goes through these. Saturating forms answer
// UINT64_MAX where the exact result would not fit, which every caller compares as "too much".
#pragma once

#include <cstdint>
#include <limits>

namespace uvmpool {

inline constexpr std::uint64_t kSizeMax = std::numeric_limits<std::uint64_t>::max();

// a + b, or kSizeMax when it does not fit.
constexpr std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kSizeMax : r;
}

// a * b, or kSizeMax when it does not fit.
constexpr std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kSizeMax : r;
}

// Whether now + more stays within limit (false when the sum would wrap).
constexpr bool fits_within(std::uint64_t now, std::uint64_t more, std::uint64_t limit) {
  return more <= limit && now <= limit - more;
}

// ⌈a / b⌉ for b > 0, without the a + b - 1 that wraps near 2^64.
constexpr std::uint64_t div_ceil(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace uvmpool
