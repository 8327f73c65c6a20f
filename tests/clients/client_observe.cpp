// A program that lets a test watch uvmpool from outside: it allocates past the device limit (so part
// spills), checks uvmpool's public statistics API through dlsym (uvmpool_get_device_stats,
// uvmpool_stats_json), prints "ready <pid> <live bytes>" and, with --hold, waits for a line on stdin
// before freeing everything, so uvmpool-stat can read it while it runs.
#include <cuda.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "linked_client.h"

int main(int argc, char** argv) {
  use_primary_context();
  size_t free_bytes = 0, total = 0;
  CU(cuMemGetInfo(&free_bytes, &total));

  // 1.5x what the device reports, in 16 MiB pieces and a few small ones.
  std::vector<CUdeviceptr> live;
  unsigned long long live_bytes = 0;
  const size_t big = 16u << 20;
  for (size_t done = 0; done < total + total / 2; done += big) {
    CUdeviceptr p = 0;
    CU(cuMemAlloc(&p, big));
    CU(cuMemsetD8(p, 0x5a, big));
    live.push_back(p);
    live_bytes += big;
  }
  for (size_t small : {1000u, 70000u}) {
    CUdeviceptr p = 0;
    CU(cuMemAlloc(&p, small));
    live.push_back(p);
    live_bytes += small;
  }

  using DeviceStatsFn = int (*)(int, uvmpool_device_stats*);
  using JsonFn = unsigned long long (*)(char*, unsigned long long);
  auto device_stats = reinterpret_cast<DeviceStatsFn>(uvmpool_api(nullptr, "uvmpool_get_device_stats"));
  auto stats_json = reinterpret_cast<JsonFn>(uvmpool_api(nullptr, "uvmpool_stats_json"));
  CLIENT_CHECK(device_stats != nullptr && stats_json != nullptr, "uvmpool's statistics API is not there");
  uvmpool_device_stats d{};
  d.struct_size = sizeof(d);
  CLIENT_CHECK(device_stats(0, &d) == 0, "no figures for device 0");
  CLIENT_CHECK(d.live_bytes + d.host_live_bytes == live_bytes, "live %llu + %llu, expected %llu", d.live_bytes,
               d.host_live_bytes, live_bytes);
  CLIENT_CHECK(d.host_live_bytes > 0 && d.spilled_allocations > 0, "nothing spilled (%llu bytes in host memory)",
               d.host_live_bytes);
  CLIENT_CHECK(d.allocations == live.size() && d.live_allocations == live.size(), "%llu allocations, %llu live",
               d.allocations, d.live_allocations);
  CLIENT_CHECK(d.held_bytes <= d.budget, "holds %llu of a budget of %llu", d.held_bytes, d.budget);
  d.struct_size = 2 * sizeof(unsigned long long);  // an older caller's smaller struct: the rest untouched
  d.live_bytes = 12345;
  CLIENT_CHECK(device_stats(0, &d) == 0 && d.live_bytes == 12345 && d.device == 0, "a short struct was overrun");
  d.struct_size = sizeof(d);
  CLIENT_CHECK(device_stats(7, &d) == 1, "device 7 was never used, yet has figures");

  // The figures (and so the length) may change between two calls: leave room to spare.
  const unsigned long long need = stats_json(nullptr, 0);
  std::string json(need + 4096, '\0');
  const unsigned long long got = stats_json(json.data(), json.size());
  CLIENT_CHECK(got > 0 && got < json.size() && std::strlen(json.c_str()) == got, "JSON length %llu, text %zu", got,
               std::strlen(json.c_str()));
  CLIENT_CHECK(json.find("\"live_host_bytes\"") != std::string::npos, "the JSON lacks live_host_bytes");
  char tiny[9];
  tiny[8] = 'x';
  CLIENT_CHECK(stats_json(tiny, 8) > 7 && std::strlen(tiny) == 7 && tiny[8] == 'x', "a short buffer was overrun");

  std::printf("ready %d %llu %zu\n", static_cast<int>(getpid()), live_bytes, live.size());
  std::fflush(stdout);
  if (has_flag(argc, argv, "--hold")) {
    char line[16];
    if (std::fgets(line, sizeof(line), stdin) == nullptr) {
      // stdin closed: go on all the same
    }
  }
  for (CUdeviceptr p : live) CU(cuMemFree(p));
  std::printf("observe client: ok\n");
  return 0;
}
