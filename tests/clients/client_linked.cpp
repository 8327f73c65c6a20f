// A program linked with -lcuda that calls the driver's exported symbols directly (cuda.h renames
// cuMemAlloc to cuMemAlloc_v2 and so on). It allocates, fills and verifies device memory; with
// --expect-uvmpool it checks that the allocations reached uvmpool through its exported symbols.
#include <cuda.h>

#include <vector>

#include "linked_client.h"

int main(int argc, char** argv) {
  use_primary_context();

  size_t free_before = 0, total = 0;
  CU(cuMemGetInfo(&free_before, &total));
  CLIENT_CHECK(total > 0 && free_before <= total, "cuMemGetInfo: %zu of %zu", free_before, total);

  const size_t words = (8u << 20) / 4;
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, words * 4));
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, d + 100));
  CLIENT_CHECK(base == d && size >= words * 4, "address range %llx+%zu for %llx", base, size, d);
  CU(cuMemsetD32(d, 0x13572468u, words));
  std::vector<unsigned> host(words);
  CU(cuMemcpyDtoH(host.data(), d, words * 4));
  for (size_t i = 0; i < words; ++i) CLIENT_CHECK(host[i] == 0x13572468u, "word %zu reads %08x", i, host[i]);

  CUdeviceptr a = 0;
  CU(cuMemAllocAsync(&a, 1u << 20, nullptr));
  CU(cuMemFreeAsync(a, nullptr));
  CU(cuStreamSynchronize(nullptr));
  CU(cuMemFree(d));

  uvmpool_stats s{};
  const bool loaded = read_uvmpool_stats(nullptr, &s);
  if (has_flag(argc, argv, "--expect-uvmpool")) {
    CLIENT_CHECK(loaded, "uvmpool is not loaded");
    CLIENT_CHECK(uvmpool_calls(nullptr, "cuMemAlloc_v2") >= 1, "cuMemAlloc_v2 did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(nullptr, "cuMemAllocAsync") >= 1, "cuMemAllocAsync did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(nullptr, "cuMemGetInfo_v2") >= 1, "cuMemGetInfo_v2 did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(nullptr, "cuMemGetAddressRange_v2") >= 1, "cuMemGetAddressRange did not reach uvmpool");
    CLIENT_CHECK(s.calls_via_export >= 5, "only %llu calls via exported symbols", s.calls_via_export);
  }
  std::printf("linked client: ok; uvmpool %s: %llu allocations, %llu frees, %llu calls via exported symbols\n",
              loaded ? "loaded" : "not loaded", s.allocations, s.frees, s.calls_via_export);
  return 0;
}
