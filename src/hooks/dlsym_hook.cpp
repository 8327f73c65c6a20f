// Route (a): the dlsym override. The CUDA runtime dlopens libcuda.so.1 and asks that handle for
// cuGetProcAddress_v2 with dlsym; answering with uvmpool's cuGetProcAddress is what lets uvmpool see
// PyTorch, CuPy and JAX at all. Runs inside the program's dlsym calls, so: no allocation, no logging,
// no driver call here. Built without sanitizer instrumentation (src/hooks/CMakeLists.txt): a
// sanitizer runtime may call dlsym before it is initialized.
#include <dlfcn.h>

#include <cstring>

#include "driver/dl.h"
#include "hooks/hooks.h"
#include "stats/counters.h"

namespace {

// True when `address` lies in a file named libcuda.so* (the real driver, or the simulated one): only
// the driver's own functions are swapped, never another library's function of the same name.
bool in_cuda_driver(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  const char* file = slash ? slash + 1 : info.dli_fname;
  return std::strncmp(file, "libcuda.so", 10) == 0;
}

__attribute__((constructor)) void prepare_dlsym_override();

}  // namespace

extern "C" {

// Read by dlsym_entry.S.
__attribute__((visibility("hidden"))) void* uvmpool_glibc_dlsym = nullptr;

__attribute__((visibility("hidden"))) void* uvmpool_dlsym_in_handle(void* handle, const char* name) {
  using namespace uvmpool;
  void* found = driver::system_dlsym(handle, name);
  if (found == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u' || hooks::disabled()) return found;
  const int entry = driver::find_symbol(name);
  if (!hooks::hands_out(entry) || !in_cuda_driver(found)) return found;
  stats::count_route(stats::Route::dlsym);
  return hooks::hook_table().raw()[entry];
}

// Before our constructor has run (a sanitizer runtime, or another library's constructor, calling
// dlsym(RTLD_NEXT, ...) first): finds glibc's dlsym for dlsym_entry.S, which then jumps to it. Calls
// nothing another runtime may intercept (driver/dl.cpp), and this file builds uninstrumented.
__attribute__((visibility("hidden"))) void* uvmpool_dlsym_resolve() {
  void* fn = uvmpool::driver::glibc_dlsym_address();
  __atomic_store_n(&uvmpool_glibc_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}

}  // extern "C"

namespace {
void prepare_dlsym_override() {
  (void)uvmpool_dlsym_resolve();
  (void)uvmpool::hooks::hook_table();  // built now, not inside a program's dlsym call
  (void)uvmpool::hooks::watches_launches();  // the options read now, likewise
}
}  // namespace
