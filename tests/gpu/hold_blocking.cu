// Which driver calls of one thread block while another thread sits in a call that waits for a stream
// held by cuStreamWaitValue32 (tiering's hold, docs/tiering.md)? On the H200, GPT-2 training under
// UVMPOOL_TIERING=auto had every hold given up by the 10 s watchdog, while a loop with no pageable
// copies drained. This program makes the situation by hand, without uvmpool:
//   1. an event, then a wait on a pinned flag, on the legacy stream (the hold);
//   2. a "program" thread enters one call on that stream (a pageable or pinned copy, a synchronize);
//   3. a "mover" thread makes the calls an epoch makes (wait for the event, copy on its own stream,
//      map and unmap), each timed;
//   4. after a second, or once the mover is done, the flag is written.
// A mover call that ends only after the flag was written was blocked by the program thread's call.
//
//   nvcc -O2 -arch=native tests/gpu/hold_blocking.cu -o hold_blocking -lcuda && ./hold_blocking [scenario]
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

#define CK(x)                                                                      \
  do {                                                                             \
    CUresult r_ = (x);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                      \
      std::printf("  %s failed: %d (line %d)\n", #x, static_cast<int>(r_), __LINE__); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

constexpr size_t kCopy = 64 << 20;
constexpr size_t kMap = 32 << 20;

struct Shared {
  CUcontext ctx = nullptr;
  volatile unsigned* flag = nullptr;
  CUdeviceptr flag_dev = 0;
  CUdeviceptr dev = 0;       // the program's copies' device side
  void* pageable = nullptr;  // malloc'd
  void* pinned = nullptr;    // cuMemHostAlloc'd
  CUstream mover_stream = nullptr;
  CUdeviceptr scratch = 0;   // the mover's copies
};

// Kernels launched for the first time in a scenario: with lazy loading (CUDA_MODULE_LOADING=LAZY, the
// default since CUDA 12.2) the first launch loads them.
template <int N>
__global__ void first_launch(int* p) {
  if (p != nullptr) p[N] = N;
}
CUstream g_side = nullptr;  // a non-blocking stream of the program, not held

// Launches queued behind the hold until one waits for room in the stream's queue (row 7 of the
// scoreboard, 2026-11-28: a job whose GPU runs far behind its launching thread keeps that queue full,
// so the first launch after a hold waits inside the driver at once). `Args` is the parameter size: a
// pointer, and a struct the size of PyTorch's elementwise kernels' (TensorIterator's offset calculators).
struct Big {
  char bytes[512];
};
__global__ void small_args(int* p) {
  if (p != nullptr) p[0] = 1;
}
__global__ void big_args(Big b) {
  if (b.bytes[0] == 7) b.bytes[1] = 1;
}
// Functions loaded from PTX but never used before their scenario: under lazy loading the module is
// loaded on first use. Does asking for a parameter's place (uvmpool's launch hook does, for a function
// it has not seen) load it, and wait like a first launch?
CUfunction g_unused_function = nullptr;
CUkernel g_unused_kernel = nullptr;
const char kPtx[] = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry unused_f(.param .u64 p) { ret; }
.visible .entry unused_k(.param .u64 p) { ret; }
)";
volatile unsigned* g_flag = nullptr;
unsigned g_value = 0;
std::atomic<long> g_queued{-1};      // launches that returned at once before the first that waited
std::atomic<double> g_first_wait{0};  // how long that one waited, ms
template <bool kBig>
void launch_until_full(Shared&) {
  long n = 0;
  g_queued = -1;
  while (n < 1000000 && __atomic_load_n(g_flag, __ATOMIC_ACQUIRE) < g_value) {
    const Clock::time_point t = Clock::now();
    if (kBig) {
      big_args<<<1, 32, 0, cudaStreamLegacy>>>(Big{});
    } else {
      small_args<<<1, 32, 0, cudaStreamLegacy>>>(nullptr);
    }
    const double took = ms_since(t);
    if (took > 5 && g_queued < 0) {
      g_queued = n;
      g_first_wait = took;
      return;  // it returned: the flag was written (the queue drained), nothing more to learn
    }
    ++n;
  }
}

// What the program thread does while the hold stands.
struct Scenario {
  const char* name;
  void (*call)(Shared&);
};

const Scenario kScenarios[] = {
    {"nothing (control)", [](Shared&) {}},
    {"cuStreamSynchronize(legacy)", [](Shared&) { cuStreamSynchronize(CU_STREAM_LEGACY); }},
    {"cuCtxSynchronize", [](Shared&) { cuCtxSynchronize(); }},
    {"cuMemcpyHtoD pageable 64 MiB", [](Shared& s) { cuMemcpyHtoD(s.dev, s.pageable, kCopy); }},
    {"cuMemcpyHtoDAsync pageable 64 MiB, legacy", [](Shared& s) { cuMemcpyHtoDAsync(s.dev, s.pageable, kCopy, CU_STREAM_LEGACY); }},
    {"cuMemcpyDtoH pageable 64 MiB", [](Shared& s) { cuMemcpyDtoH(s.pageable, s.dev, kCopy); }},
    {"cuMemcpyHtoD pinned 64 MiB", [](Shared& s) { cuMemcpyHtoD(s.dev, s.pinned, kCopy); }},
    {"cuMemcpyDtoH pinned 64 MiB", [](Shared& s) { cuMemcpyDtoH(s.pinned, s.dev, kCopy); }},
    {"cudaMemcpy H2D pageable 4 KiB", [](Shared& s) { cudaMemcpy(reinterpret_cast<void*>(s.dev), s.pageable, 4096, cudaMemcpyHostToDevice); }},
    {"cudaMemcpy D2H pageable 4 B", [](Shared& s) { cudaMemcpy(s.pageable, reinterpret_cast<void*>(s.dev), 4, cudaMemcpyDeviceToHost); }},
    {"cuMemAlloc + cuMemFree 64 MiB", [](Shared&) { CUdeviceptr p = 0; if (cuMemAlloc(&p, kCopy) == CUDA_SUCCESS) cuMemFree(p); }},
    {"first launch of a kernel, on a stream not held", [](Shared&) { first_launch<1><<<1, 1, 0, reinterpret_cast<cudaStream_t>(g_side)>>>(nullptr); }},
    {"first launch of a kernel, on the held legacy stream", [](Shared&) { first_launch<2><<<1, 1, 0, cudaStreamLegacy>>>(nullptr); }},
    {"second launch of a kernel, on the held legacy stream", [](Shared&) { first_launch<2><<<1, 1, 0, cudaStreamLegacy>>>(nullptr); }},
    {"cuMemHostAlloc + cuMemFreeHost 2 MiB", [](Shared&) { void* p = nullptr; if (cuMemHostAlloc(&p, 2 << 20, 0) == CUDA_SUCCESS) cuMemFreeHost(p); }},
    {"cuStreamCreate + cuStreamDestroy", [](Shared&) { CUstream s = nullptr; if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) cuStreamDestroy(s); }},
    {"cuMemGetInfo", [](Shared&) { size_t f = 0, t = 0; cuMemGetInfo(&f, &t); }},
    {"cuMemsetD8 (synchronous form) 64 MiB", [](Shared& s) { cuMemsetD8(s.dev, 0, kCopy); }},
    {"cuFuncGetParamInfo of a function never used", [](Shared&) { size_t o = 0, z = 0; cuFuncGetParamInfo(g_unused_function, 0, &o, &z); }},
    {"cuKernelGetParamInfo of a kernel never used", [](Shared&) { size_t o = 0, z = 0; cuKernelGetParamInfo(g_unused_kernel, 0, &o, &z); }},
    {"launches of a loaded kernel (8 B of parameters) on the held legacy stream until one waits", launch_until_full<false>},
    {"launches of a loaded kernel (512 B of parameters) on the held legacy stream until one waits", launch_until_full<true>},
};

// The calls of one epoch, each timed from the scenario's start; `released_at` is when the flag went up.
void mover(Shared& s, Clock::time_point t0, std::vector<std::pair<std::string, double>>* out, CUevent e) {
  cuCtxSetCurrent(s.ctx);
  auto note = [&](const char* what) { out->push_back({what, ms_since(t0)}); };
  {
    CUcontext popped = nullptr;
    cuCtxPushCurrent(s.ctx);
    cuCtxPopCurrent(&popped);
    note("cuCtxPushCurrent + cuCtxPopCurrent");
  }
  cuEventQuery(e);
  note("cuEventQuery(event before the hold)");
  cuStreamQuery(s.mover_stream);
  note("cuStreamQuery(mover's stream)");
  cuEventSynchronize(e);
  note("cuEventSynchronize(event before the hold)");
  cuMemcpyDtoDAsync(s.scratch, s.scratch + kMap, kMap, s.mover_stream);
  note("cuMemcpyDtoDAsync on the mover's stream");
  cuStreamSynchronize(s.mover_stream);
  note("cuStreamSynchronize(mover's stream)");
  // A move's target pieces when it is prepared at the hold (docs/tiering.md, "Prepared at the hold"):
  // made, mapped at a staging address, copied into, taken apart, on the device and then in pinned host
  // memory (HOST_NUMA 0, mapped for the device only, as the pool makes them). Does any step, or the
  // first use of the new mapping, wait for the held work?
  for (const CUmemLocation where : {CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}}) {
    const std::string tier = where.type == CU_MEM_LOCATION_TYPE_DEVICE ? "device" : "host";
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = where;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    cuMemAddressReserve(&va, kMap, 0, 0, 0);
    const CUresult created = cuMemCreate(&h, kMap, &prop, 0);
    out->push_back({tier + " 32 MiB: cuMemAddressReserve + cuMemCreate" + (created == CUDA_SUCCESS ? "" : " FAILED"), ms_since(t0)});
    if (created == CUDA_SUCCESS) {
      cuMemMap(va, kMap, 0, h, 0);
      CUmemAccessDesc acc{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      cuMemSetAccess(va, kMap, &acc, 1);
      out->push_back({tier + ": cuMemMap + cuMemSetAccess (device)", ms_since(t0)});
      cuMemcpyDtoDAsync(va, s.scratch, kMap, s.mover_stream);
      cuStreamSynchronize(s.mover_stream);
      out->push_back({tier + ": a copy into the new mapping + cuStreamSynchronize", ms_since(t0)});
      cuMemUnmap(va, kMap);
      out->push_back({tier + ": cuMemUnmap", ms_since(t0)});
      cuMemRelease(h);
    }
    cuMemAddressFree(va, kMap);
    out->push_back({tier + ": cuMemRelease + cuMemAddressFree", ms_since(t0)});
  }
}

}  // namespace

int main(int argc, char** argv) {
  // ./hold_blocking [part of a scenario's name]: only the scenarios whose names contain it.
  const char* only = argc > 1 ? argv[1] : nullptr;
  Shared s;
  CK(cuInit(0));
  CUdevice d = 0;
  CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&s.ctx, d));
  CK(cuCtxSetCurrent(s.ctx));
  cudaSetDevice(0);
  void* f = nullptr;
  CK(cuMemHostAlloc(&f, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  s.flag = static_cast<volatile unsigned*>(f);
  CK(cuMemHostGetDevicePointer(&s.flag_dev, f, 0));
  CK(cuMemAlloc(&s.dev, kCopy));
  CK(cuMemAlloc(&s.scratch, 2 * kMap));
  s.pageable = std::malloc(kCopy);
  std::memset(s.pageable, 1, kCopy);
  CK(cuMemHostAlloc(&s.pinned, kCopy, 0));
  CK(cuStreamCreate(&s.mover_stream, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&g_side, CU_STREAM_NON_BLOCKING));
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("hold_blocking: CUDA_MODULE_LOADING=%s; times in ms from the hold; the flag is written at 1000 ms or when the mover is done\n",
              loading != nullptr ? loading : "(unset)");
  unsigned value = 0;
  bool any_blocked = false;
  g_flag = s.flag;
  CUmodule unused_module = nullptr;
  CK(cuModuleLoadData(&unused_module, kPtx));
  CK(cuModuleGetFunction(&g_unused_function, unused_module, "unused_f"));
  CUlibrary unused_library = nullptr;
  CK(cuLibraryLoadData(&unused_library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CK(cuLibraryGetKernel(&g_unused_kernel, unused_library, "unused_k"));
  small_args<<<1, 32>>>(nullptr);  // loaded before the scenarios: their launches are not first launches
  big_args<<<1, 32>>>(Big{});
  CK(cuCtxSynchronize());
  for (const Scenario& sc : kScenarios) {
    if (only != nullptr && std::strstr(sc.name, only) == nullptr) continue;
    ++value;
    g_value = value;
    g_queued = -1;
    CUevent e = nullptr;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(e, CU_STREAM_LEGACY));
    CK(cuStreamWaitValue32(CU_STREAM_LEGACY, s.flag_dev, value, CU_STREAM_WAIT_VALUE_GEQ));
    const Clock::time_point t0 = Clock::now();
    std::atomic<double> program_done{-1};
    std::thread program([&] {
      cuCtxSetCurrent(s.ctx);
      sc.call(s);
      program_done = ms_since(t0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the program thread is in its call
    std::vector<std::pair<std::string, double>> calls;
    std::atomic<bool> mover_done{false};
    std::thread m([&] {
      mover(s, t0, &calls, e);
      mover_done = true;
    });
    while (!mover_done && ms_since(t0) < 1000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double released = ms_since(t0);
    __atomic_store_n(s.flag, value, __ATOMIC_RELEASE);
    m.join();
    program.join();
    cuCtxSynchronize();
    cuEventDestroy(e);
    bool blocked = false;
    for (const auto& c : calls) blocked |= c.second >= released;
    any_blocked |= blocked;
    std::printf("\n[%s] program thread: %s; flag written at %.1f; program's call done at %.1f\n", sc.name,
                blocked ? "BLOCKED the mover" : "the mover went on", released, program_done.load());
    if (g_queued >= 0)
      std::printf("  %ld launches queued behind the hold before one waited (%.1f ms, until the flag)\n", g_queued.load(),
                  g_first_wait.load());
    for (const auto& c : calls) std::printf("  %8.1f  %s%s\n", c.second, c.first.c_str(), c.second >= released ? "  (after the flag)" : "");
  }
  std::printf("\nHOLD_BLOCKING %s\n", any_blocked ? "some calls blocked the mover" : "no call blocked the mover");
  return 0;
}
