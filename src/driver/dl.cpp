#include "driver/dl.h"

#include <dlfcn.h>

#include <atomic>

namespace uvmpool::driver {

namespace {
using Dlsym = void* (*)(void*, const char*);

Dlsym find_glibc_dlsym() {
  // dlvsym with glibc's own version names finds glibc's dlsym and never an override (ours, or
  // another tool's, which do not carry glibc's versions). Nothing else is called: this may run
  // inside a sanitizer runtime's first dlsym(RTLD_NEXT, ...), before its dlopen interceptor works.
  // glibc 2.34 moved dlsym into libc under a new version; older ones have 2.2.5.
  auto fn = reinterpret_cast<Dlsym>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
  if (fn == nullptr) fn = reinterpret_cast<Dlsym>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
  return fn;
}

std::atomic<Dlsym> glibc_dlsym{nullptr};

Dlsym resolved_glibc_dlsym() {
  Dlsym fn = glibc_dlsym.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = find_glibc_dlsym();
    if (fn != nullptr) glibc_dlsym.store(fn, std::memory_order_release);
  }
  return fn;
}

}  // namespace

void* system_dlsym(void* handle, const char* name) {
  Dlsym fn = resolved_glibc_dlsym();
  return fn == nullptr ? nullptr : fn(handle, name);
}

void prepare_system_dlsym() { (void)resolved_glibc_dlsym(); }

void* glibc_dlsym_address() { return reinterpret_cast<void*>(resolved_glibc_dlsym()); }

}  // namespace uvmpool::driver
