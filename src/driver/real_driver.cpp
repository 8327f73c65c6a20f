#include "driver/real_driver.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "config/log.h"
#include "driver/dl.h"
#include "config/options.h"

namespace uvmpool::driver {
namespace {

// Where distributions and container runtimes put the driver, in the order they are tried.
constexpr const char* kSystemLocations[] = {
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/local/nvidia/lib/libcuda.so.1",     "/usr/lib/wsl/lib/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
};

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// The file the dynamic loader would pick for "libcuda.so.1", without loading anything new.
std::string library_path_choice() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return {};
  std::string path;
  link_map* map = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr)
    path = map->l_name;
  dlclose(h);
  return path;
}

// Entry points every CUDA driver has had since CUDA 4 and no other library exports: a file without
// them (libz, libuvmpool.so, anything named by mistake) is not a driver, whatever its name.
constexpr const char* kDriverEntryPoints[] = {"cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuCtxGetCurrent"};

// Why `handle` (opened from `path`) cannot serve as the real driver, or "" when it can.
std::string not_a_driver(void* handle, const std::string& path) {
  if (same_file(path, own_path())) return "is uvmpool itself, not the CUDA driver";
  // Another uvmpool library (libuvmpool.so, a copy of the drop-in): its driver functions are hooks
  // or forwarders that would come back here.
  if (system_dlsym(handle, "uvmpool_version") != nullptr) return "is a uvmpool library, not the CUDA driver";
  for (const char* name : kDriverEntryPoints) {
    if (system_dlsym(handle, name) == nullptr) return std::string("lacks the driver entry point ") + name + ", so it is not the CUDA driver";
  }
  return {};
}

std::atomic<bool> g_requested{false};

RealDriver* open_driver() {
  g_requested.store(true, std::memory_order_relaxed);  // here, once, rather than on every real()
  const auto& opts = config::options();
  const std::string path = locate_driver(opts.driver_path, own_path());
  if (path.empty()) {
    log::error("no CUDA driver found (set UVMPOOL_DRIVER_PATH to the real libcuda.so.1)");
    return nullptr;
  }
  // The path names what it came from, so the one line says which setting to fix.
  const std::string named = opts.driver_path.empty() ? path : "UVMPOOL_DRIVER_PATH=" + path;
  if (same_file(path, own_path())) {  // checked before dlopen, which would hand back ourselves
    log::error("{} is uvmpool itself, not the CUDA driver; every CUDA call answers CUDA_ERROR_NO_DEVICE", named);
    return nullptr;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    log::error("cannot open the CUDA driver {}: {}", named, why ? why : "unknown error");
    return nullptr;
  }
  if (const std::string why = not_a_driver(handle, path); !why.empty()) {
    log::error("{} {}; every CUDA call answers CUDA_ERROR_NO_DEVICE", named, why);
    // Left loaded: its constructors have run and made the process-lifetime objects a library keeps
    // and never frees (another uvmpool library's option table, logger...); unloading it would leak
    // them, unreachable (LeakSanitizer reports it). One wrongly named library stays mapped, no more.
    return nullptr;
  }
  auto* driver = new RealDriver{handle, path, {}};
  for (std::size_t i = 0; i < kFunctionCount; ++i)
    driver->table.raw()[i] = system_dlsym(handle, kFunctions[i].symbol);
  log::debug("real CUDA driver: {}", path);
  return driver;
}

}  // namespace

std::string own_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_path), &info) == 0 || info.dli_fname == nullptr) return {};
  return info.dli_fname;
}

std::string locate_driver(const std::string& configured_path, const std::string& self_path) {
  if (!configured_path.empty()) return configured_path;
  auto usable = [&](const std::string& p) { return !p.empty() && exists(p) && !same_file(p, self_path); };

  if (std::string chosen = library_path_choice(); usable(chosen)) return chosen;
  // The loader picked our own file (drop-in mode): look past it, folder by folder.
  if (const char* llp = std::getenv("LD_LIBRARY_PATH")) {
    std::string_view rest = llp;
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string dir(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
      if (!dir.empty() && usable(dir + "/libcuda.so.1")) return dir + "/libcuda.so.1";
    }
  }
  for (const char* candidate : kSystemLocations)
    if (usable(candidate)) return candidate;
  return {};
}

const RealDriver* real() {
  // Leaked on purpose: hooks may run during process exit, after static destructors.
  static RealDriver* driver = open_driver();
  return driver;
}

bool requested() { return g_requested.load(std::memory_order_relaxed); }

void* real_symbol(const char* name) {
  const RealDriver* d = real();
  return d ? system_dlsym(d->handle, name) : nullptr;
}

}  // namespace uvmpool::driver
