// The one place uvmpool asks the dynamic loader for symbols. When libuvmpool.so is preloaded it
// overrides dlsym for the whole process, so a plain dlsym() inside uvmpool would come back to that
// override; everything here goes to glibc's own dlsym instead.
#pragma once

namespace uvmpool::driver {

// glibc's dlsym, whichever symbol version this glibc has. Allocates nothing, logs nothing.
void* system_dlsym(void* handle, const char* name);

}  // namespace uvmpool::driver

namespace uvmpool::driver {
// Resolves glibc's dlsym now, from a library constructor, so that resolving it never happens inside
// a program's own dlsym call.
void prepare_system_dlsym();

// The address of glibc's dlsym itself (nullptr if it cannot be found).
void* glibc_dlsym_address();
}  // namespace uvmpool::driver
