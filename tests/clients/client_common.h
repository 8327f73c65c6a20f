// Shared by the client programs: checks that print what failed and exit non-zero, and a look at
// uvmpool's public API through dlsym (the programs do not link uvmpool, as a user's would not).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "uvmpool/uvmpool.h"

#define CLIENT_CHECK(cond, ...)                       \
  do {                                                \
    if (!(cond)) {                                    \
      std::fprintf(stderr, "client: FAILED %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);              \
      std::fprintf(stderr, "\n");                     \
      std::exit(1);                                   \
    }                                                 \
  } while (0)

// A driver call that must succeed.
#define CU(call)                                                        \
  do {                                                                  \
    const CUresult r_ = (call);                                         \
    CLIENT_CHECK(r_ == CUDA_SUCCESS, "%s returned %d", #call, int(r_)); \
  } while (0)

// uvmpool's API is in libuvmpool.so when preloaded (global scope), or in the drop-in libcuda.so.1
// (reached through the program's own libcuda handle when that was dlopened locally).
inline void* uvmpool_api(void* libcuda, const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  return f != nullptr || libcuda == nullptr ? f : dlsym(libcuda, name);
}

inline unsigned long long uvmpool_calls(void* libcuda, const char* fn) {
  using Fn = unsigned long long (*)(const char*);
  auto f = reinterpret_cast<Fn>(uvmpool_api(libcuda, "uvmpool_hook_calls"));
  return f ? f(fn) : 0;
}

// A process-wide figure of uvmpool's JSON statistics ("name": value), or -1 when absent.
inline long long uvmpool_figure(void* libcuda, const char* name) {
  using Json = unsigned long long (*)(char*, unsigned long long);
  auto json = reinterpret_cast<Json>(uvmpool_api(libcuda, "uvmpool_stats_json"));
  if (json == nullptr) return -1;
  std::string text(json(nullptr, 0) + 4096, '\0');  // room for a figure that grows meanwhile
  json(text.data(), text.size());
  const std::string key = std::string("\"") + name + "\":";
  const auto at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::atoll(text.c_str() + at + key.size());
}

inline bool read_uvmpool_stats(void* libcuda, uvmpool_stats* s) {
  using Fn = int (*)(uvmpool_stats*);
  auto f = reinterpret_cast<Fn>(uvmpool_api(libcuda, "uvmpool_get_stats"));
  *s = {};
  s->struct_size = sizeof(*s);
  return f != nullptr && f(s) == 0;
}

inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == flag) return true;
  return false;
}
