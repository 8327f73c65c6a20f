// Internal consistency checks, compiled in by UVMPOOL_CHECKS (CMake; on in Debug and sanitizer
// builds, which CI's ASan run is, off in the release build: no code there, the condition is not
// evaluated). A failed check logs what broke, where, and aborts: a structure found inconsistent
// would hand out memory twice or lose it, and a test should stop at the first sign of it.
//
// Only what holds under the lock the caller holds belongs here (the pool's are local: one descriptor,
// or counters written under that lock); the structure-wide sums need every thread out of the pool
// and stay in the tests (DevicePool::check_invariants).
#pragma once

#if defined(UVMPOOL_CHECKS) && UVMPOOL_CHECKS
#define UVMPOOL_CHECK(condition, what)                                                    \
  do {                                                                                    \
    if (!(condition)) ::uvmpool::check_failed(#condition, what, __FILE__, __LINE__);      \
  } while (false)
#else
#define UVMPOOL_CHECK(condition, what) \
  do {                                 \
  } while (false)
#endif

namespace uvmpool {
[[noreturn]] void check_failed(const char* condition, const char* what, const char* file, int line) noexcept;
}  // namespace uvmpool
