// Memory uvmpool leaves allocated on purpose, told to LeakSanitizer.
//
// After fork the child abandons the parent's pool: its destructors would call the driver and join
// threads that do not exist in the child, so the pool is leaked whole (pool.cpp, Pool::abandon).
// Under ASan that leak is reported at exit and fails the program; marking the object as ignored
// makes LeakSanitizer treat it, and everything reachable from it, as live. Without a sanitizer
// this compiles to nothing.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define UVMPOOL_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(UVMPOOL_LSAN)
#define UVMPOOL_LSAN 1
#endif

#ifdef UVMPOOL_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace uvmpool::config {

// Marks a heap object that is leaked on purpose; returns it, so a release() can be wrapped.
template <typename T>
T* intentionally_leaked(T* object) {
#ifdef UVMPOOL_LSAN
  if (object != nullptr) __lsan_ignore_object(object);
#endif
  return object;
}

}  // namespace uvmpool::config
