/* Another tool's preload that overrides dlsym, as profilers do: it forwards to the next dlsym and,
 * from its constructor (which may run before uvmpool's), resolves a symbol with RTLD_NEXT. The hooks
 * tests preload it before and after libuvmpool.so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

static void* (*next_dlsym)(void*, const char*);

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  if (next_dlsym == NULL) {
    next_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (next_dlsym == NULL) next_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (next_dlsym == NULL) return NULL;
  }
  return next_dlsym(handle, name);
}

__attribute__((constructor)) static void resolve_early(void) {
  if (dlsym(RTLD_NEXT, "malloc") == NULL || dlsym(RTLD_DEFAULT, "free") == NULL) {
    fputs("other dlsym preload: an early lookup failed\n", stderr);
    _exit(3);
  }
}
