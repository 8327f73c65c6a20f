// The real CUDA driver, opened at run time by absolute path; never linked, never ourselves.
#pragma once

#include <string>

#include "driver/driver_api.h"

namespace uvmpool::driver {

struct RealDriver {
  void* handle = nullptr;  // dlopen handle of the real libcuda.so.1
  std::string path;        // the file it came from
  Table table;             // every entry of the list, resolved with dlsym (nullptr if absent)
};

// The real driver, opened on first use (thread-safe). nullptr when none can be found; the reason
// was logged once. Never called while a symbol is being resolved (see hooks/).
const RealDriver* real();

// Whether anything in this process asked for the real driver (real() was called): a process that
// never reached CUDA, such as a shell or `timeout` that runs the program under the same LD_PRELOAD,
// did not.
bool requested();

// The real driver's typed table; only valid when real() is not nullptr.
inline const Table& fn() { return real()->table; }

// Any symbol of the real driver by name (for pass-through of what the list does not name).
void* real_symbol(const char* name);

// How the driver file is chosen, split out so tests can check it: UVMPOOL_DRIVER_PATH when set;
// otherwise "libcuda.so.1" through the library path unless that resolves to `self` (our own file,
// as in drop-in mode); then each LD_LIBRARY_PATH folder and the usual system locations.
std::string locate_driver(const std::string& configured_path, const std::string& self_path);

// The file this code was loaded from (libuvmpool.so, the drop-in libcuda.so.1, or a test binary).
std::string own_path();

}  // namespace uvmpool::driver
