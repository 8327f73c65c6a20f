#include "driver/dl.h"

#include <dlfcn.h>

#include <atomic>

namespace uvmpool::driver {

namespace {
using Dlsym = void* (*)(void*, const char*);

Dlsym find_glibc_dlsym() {
  // Ask libc itself by handle: RTLD_NEXT/RTLD_DEFAULT could land on a preloaded override (ours or
  // another tool's). glibc 2.34 moved dlsym into libc under a new version; older ones have 2.2.5.
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr) return nullptr;
  auto fn = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  if (fn == nullptr) fn = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  dlclose(libc);
  return fn;
}

std::atomic<Dlsym> glibc_dlsym{nullptr};
}  // namespace

void* system_dlsym(void* handle, const char* name) {
  Dlsym fn = glibc_dlsym.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = find_glibc_dlsym();
    if (fn == nullptr) return nullptr;
    glibc_dlsym.store(fn, std::memory_order_release);
  }
  return fn(handle, name);
}

void prepare_system_dlsym() { system_dlsym(RTLD_DEFAULT, "dlsym"); }

void* glibc_dlsym_address() {
  prepare_system_dlsym();
  return reinterpret_cast<void*>(glibc_dlsym.load(std::memory_order_acquire));
}

}  // namespace uvmpool::driver
