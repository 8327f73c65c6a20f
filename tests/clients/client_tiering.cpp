// A runtime-like program (every driver function from cuGetProcAddress) under uvmpool with tiering, for
// the hooks tests (tests/hooks/CMakeLists.txt). Past UVMPOOL_DEVICE_LIMIT=64M:
//   1. prefetches (cuMemPrefetchAsync, both forms, the per-thread one too) move a device allocation out
//      and a spilled one in, with their bytes; advice (cuMemAdvise, both forms) on pool memory is
//      answered by uvmpool, on the driver's own memory by the driver; a batch of prefetches
//      (cuMemPrefetchBatchAsync) with the driver's memory in it is the driver's; the C API (uvmpool_prefetch,
//      uvmpool_advise) refuses what is not pool memory; a prefetch on a capturing stream, and advice
//      where a capture forbids it, are refused by the driver, spoiling the capture;
//   2. a kernel cycling over three 32 MiB buffers (more than the device holds) repeats long enough for
//      the policy to learn the sequence and move buffers ahead of the launches, and every value the
//      kernels wrote is read back.
// With UVMPOOL_TIERING=auto it waits (up to 20 s) for the moves; otherwise it checks none happen. Prints:
//   tiering client: ok; prefetched <bytes in> in, <bytes out> out; foreign advice <CUresult>;
//   uvmpool_advise <answer>; prefetches <n>; advice <n>; period <n>; promoted more|no more
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "getproc_client.h"

namespace {

void* libcuda = nullptr;

// Waits until `name` reaches `at_least` (tiering=auto), or checks it stays 0 (otherwise). The figure.
long long wait_for(bool moves, const char* name, long long at_least, CUresult (*sync)()) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  long long v = uvmpool_figure(libcuda, name);
  while (moves && v < at_least && std::chrono::steady_clock::now() < deadline) {
    CU(sync());  // the simulated driver advances its streams on driver calls
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    v = uvmpool_figure(libcuda, name);
  }
  CLIENT_CHECK(moves ? v >= at_least : v == 0, "%s is %lld (auto: %d, wanted %lld)", name, v, int(moves), at_least);
  return v;
}

}  // namespace

int main() {
  CUdevice dev = 0;
  libcuda = open_driver_as_runtime(&dev);
  const char* mode = std::getenv("UVMPOOL_TIERING");
  const bool moves = mode != nullptr && std::string_view(mode) == "auto";
  namespace s = uvmpool::driver::sig;
  auto mem_alloc = resolve<s::cuMemAlloc_v2>("cuMemAlloc", 3020);
  auto mem_free = resolve<s::cuMemFree_v2>("cuMemFree", 3020);
  auto alloc_host = resolve<s::cuMemAllocHost_v2>("cuMemAllocHost", 3020);
  auto free_host = resolve<s::cuMemFreeHost>("cuMemFreeHost", 2000);
  auto memset32 = resolve<s::cuMemsetD32_v2>("cuMemsetD32", 3020);
  auto dtoh = resolve<s::cuMemcpyDtoH_v2>("cuMemcpyDtoH", 3020);
  auto sync = resolve<s::cuCtxSynchronize>("cuCtxSynchronize", 2000);
  auto stream_create = resolve<s::cuStreamCreate>("cuStreamCreate", 2000);
  auto stream_destroy = resolve<s::cuStreamDestroy_v2>("cuStreamDestroy", 4000);
  auto begin_capture = resolve<s::cuStreamBeginCapture_v2>("cuStreamBeginCapture", 10010);
  auto end_capture = resolve<s::cuStreamEndCapture>("cuStreamEndCapture", 10000);
  auto is_capturing = resolve<s::cuStreamIsCapturing>("cuStreamIsCapturing", 10000);
  auto graph_destroy = resolve<s::cuGraphDestroy>("cuGraphDestroy", 10000);
  auto prefetch = resolve<s::cuMemPrefetchAsync_v2>("cuMemPrefetchAsync", 12020);
  auto prefetch_v1_ptsz =
      resolve<s::cuMemPrefetchAsync_ptsz>("cuMemPrefetchAsync", 8000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  auto prefetch_batch = resolve<s::cuMemPrefetchBatchAsync>("cuMemPrefetchBatchAsync", 13000);
  auto advise = resolve<s::cuMemAdvise_v2>("cuMemAdvise", 12020);
  auto advise_v1 = resolve<s::cuMemAdvise>("cuMemAdvise", 8000);
  auto load = resolve<s::cuModuleLoadData>("cuModuleLoadData", 2000);
  auto get_function = resolve<s::cuModuleGetFunction>("cuModuleGetFunction", 2000);
  auto unload = resolve<s::cuModuleUnload>("cuModuleUnload", 2000);
  auto launch = resolve<s::cuLaunchKernel>("cuLaunchKernel", 4000);
  using Prefetch = int (*)(unsigned long long, unsigned long long, int);
  auto uvmpool_prefetch = reinterpret_cast<Prefetch>(uvmpool_api(libcuda, "uvmpool_prefetch"));
  auto uvmpool_advise = reinterpret_cast<Prefetch>(uvmpool_api(libcuda, "uvmpool_advise"));
  CLIENT_CHECK(uvmpool_prefetch != nullptr && uvmpool_advise != nullptr, "no uvmpool_prefetch / uvmpool_advise");

  // 1. 48 MiB on the device, then 32 MiB of which the last 16 lie in host memory.
  constexpr std::size_t kMiB = 1u << 20;
  CUdeviceptr a = 0, b = 0;
  CU(mem_alloc(&a, 48 * kMiB));
  CU(mem_alloc(&b, 32 * kMiB));
  CU(memset32(a, 0xa, 48 * kMiB / 4));
  CU(memset32(b, 0xb, 32 * kMiB / 4));
  const CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CU(prefetch(a, 48 * kMiB, host, 0, nullptr));
  CU(prefetch_v1_ptsz(b + 16 * kMiB, 16 * kMiB, dev, nullptr));
  const long long out = wait_for(moves, "tiering_demoted_bytes", 48 * kMiB, sync);
  const long long in = wait_for(moves, "tiering_promoted_bytes", 16 * kMiB, sync);
  std::vector<std::uint32_t> got(48 * kMiB / 4);
  CU(dtoh(got.data(), a, 48 * kMiB));
  for (std::uint32_t v : got) CLIENT_CHECK(v == 0xa, "a holds %#x", v);
  CU(dtoh(got.data(), b, 32 * kMiB));
  for (std::size_t i = 0; i < 32 * kMiB / 4; ++i) CLIENT_CHECK(got[i] == 0xb, "b holds %#x at %zu", got[i], i);

  // Advice: pool memory's answered by uvmpool, the driver's own memory by the driver.
  const CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CU(advise(b, 32 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device));
  CU(advise_v1(a, 48 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, CU_DEVICE_CPU));
  CLIENT_CHECK(advise(b, 32 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CUmemLocation{}) == CUDA_ERROR_INVALID_VALUE,
               "a location of no type accepted");
  CLIENT_CHECK(prefetch(b, 64 * kMiB, device, 0, nullptr) == CUDA_ERROR_INVALID_VALUE, "a prefetch past b's end accepted");
  void* pinned = nullptr;
  CU(alloc_host(&pinned, 4096));
  const CUresult foreign = advise(reinterpret_cast<CUdeviceptr>(pinned), 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, device);
  // A batch of prefetches (CUDA 13): the pool's ranges are uvmpool's to answer, the rest the driver's,
  // which refuses the pinned memory (not managed) and with it the whole batch; without it, uvmpool's.
  {
    CUdeviceptr ptrs[2] = {b, reinterpret_cast<CUdeviceptr>(pinned)};
    std::size_t sizes[2] = {32 * kMiB, 4096}, first = 0;
    CUmemLocation where = device;
    CLIENT_CHECK(prefetch_batch(ptrs, sizes, 2, &where, &first, 1, 0, nullptr) == CUDA_ERROR_INVALID_VALUE,
                 "a batch with memory neither the pool's nor managed accepted");
    CU(prefetch_batch(ptrs, sizes, 1, &where, &first, 1, 0, nullptr));
  }
  CU(free_host(pinned));
  // What a graph capture forbids is the driver's to refuse, pool memory or not, and the refusal
  // spoils the capture as it would without uvmpool (tests/fidelity/capture_test.cpp): a prefetch on
  // the capturing stream, advice from the capturing thread in global mode. In relaxed mode advice is
  // uvmpool's to answer.
  {
    CUstream st = nullptr;
    CU(stream_create(&st, CU_STREAM_NON_BLOCKING));
    const auto spoiled = [&](CUstreamCaptureMode capture_mode, auto&& call, const char* what) {
      CU(begin_capture(st, capture_mode));
      const CUresult got = call();
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      CU(is_capturing(st, &status));
      CUgraph graph = nullptr;
      const CUresult ended = end_capture(st, &graph);
      if (graph != nullptr) CU(graph_destroy(graph));
      CLIENT_CHECK(got == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && status == CU_STREAM_CAPTURE_STATUS_INVALIDATED &&
                       ended == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                   "%s during a capture: answered %d, status %d, the capture ended with %d", what, int(got),
                   int(status), int(ended));
    };
    spoiled(CU_STREAM_CAPTURE_MODE_RELAXED, [&] { return prefetch(b, 32 * kMiB, device, 0, st); },
            "a prefetch on the capturing stream");
    spoiled(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return advise(b, 32 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, device); },
            "advice in global mode");
    CU(begin_capture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(advise(b, 32 * kMiB, CU_MEM_ADVISE_SET_READ_MOSTLY, device));
    CUgraph graph = nullptr;
    CU(end_capture(st, &graph));
    if (graph != nullptr) CU(graph_destroy(graph));
    CU(stream_destroy(st));
  }
  const int advised = uvmpool_advise(b, 32 * kMiB, UVMPOOL_TIER_DEVICE);  // 0: kept; 1: tiering off
  CLIENT_CHECK(uvmpool_prefetch(b, 32 * kMiB, 7) == -1, "uvmpool_prefetch took tier 7");
  CLIENT_CHECK(uvmpool_prefetch(4096, 4096, UVMPOOL_TIER_HOST) == -1, "uvmpool_prefetch took memory not the pool's");
  CLIENT_CHECK(uvmpool_advise(b, 32 * kMiB, -1) == advised, "uvmpool_advise answered otherwise taking it back");
  CU(mem_free(a));
  CU(mem_free(b));

  // 2. Three 32 MiB buffers, a kernel writing four 4 KiB blocks of each in turn (the test sets
  // UVMPOOL_TIERING_LOOKAHEAD=4: with the default of 32 launches, all three are needed within it, and no
  // buffer may go to make room for another).
  CUmodule module = nullptr;
  CU(load(&module, "uvmpool-sim-module 1\n"));
  CUfunction fill = nullptr;
  CU(get_function(&fill, module, "uvmpool_fill_u32"));
  CUdeviceptr buffers[3] = {};
  for (CUdeviceptr& p : buffers) CU(mem_alloc(&p, 32 * kMiB));
  constexpr std::uint32_t kRounds = 60, kRepeats = 4;
  std::uint64_t count = 1024;
  for (std::uint32_t round = 0; round < kRounds; ++round) {
    for (std::uint32_t i = 0; i < 3 * kRepeats; ++i) {
      CUdeviceptr dst = buffers[i / kRepeats] + (i % kRepeats) * 4096;
      std::uint32_t value = round * 3 + i / kRepeats;
      void* params[] = {&dst, &count, &value};
      CU(launch(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    }
  }
  const long long promoted = wait_for(moves, "tiering_promoted_bytes", in + 1, sync);
  CU(sync());
  for (std::uint32_t i = 0; i < 3; ++i) {
    std::vector<std::uint32_t> words(count * kRepeats);
    CU(dtoh(words.data(), buffers[i], count * 4 * kRepeats));
    for (std::uint32_t v : words) CLIENT_CHECK(v == (kRounds - 1) * 3 + i, "buffer %u holds %u", i, v);
  }
  for (CUdeviceptr p : buffers) CU(mem_free(p));
  CU(unload(module));

  std::printf("tiering client: ok; prefetched %lld in, %lld out; foreign advice %d; uvmpool_advise %d; prefetches %lld; "
              "advice %lld; period %lld, learned %lld, dropped %lld; promoted %s\n",
              in, out, int(foreign), advised, uvmpool_figure(libcuda, "tiering_prefetches"), uvmpool_figure(libcuda, "tiering_advice"),
              uvmpool_figure(libcuda, "tiering_period"), uvmpool_figure(libcuda, "tiering_periods_learned"),
              uvmpool_figure(libcuda, "tiering_periods_dropped"), promoted > in ? "more" : "no more");
  return 0;
}
