/* Preloaded beside uvmpool by the hardening tests: malloc fails on the calling thread while
 * shim_fail_malloc(1) is in force, so any `new` inside a hook throws std::bad_alloc. */
#include <errno.h>
#include <stddef.h>

extern void* __libc_malloc(size_t);

static __thread int failing;

__attribute__((visibility("default"))) void shim_fail_malloc(int on) { failing = on; }

__attribute__((visibility("default"))) void* malloc(size_t n) {
  if (failing) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_malloc(n);
}
