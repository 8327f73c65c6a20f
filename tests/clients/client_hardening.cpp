// A program linked with -lcuda that does what probing found uvmpool could not survive (issue 17).
// Each mode prints what the driver (through uvmpool) answered and exits 0, or exits non-zero / dies
// when uvmpool crashed, hung or let an exception through:
//   huge   cuMemAlloc of 2^62 bytes: must answer an error (OUT_OF_MEMORY), never abort.
//   throw  (with tests/clients/malloc_fail_shim.c preloaded) every malloc of this thread fails during
//          the program's first cuMemAlloc, so uvmpool's pool throws std::bad_alloc inside the hook:
//          the hook must answer OUT_OF_MEMORY, and the next allocation must work.
//   throw-launch  (malloc_fail_shim.c preloaded, UVMPOOL_TIERING=auto, a small UVMPOOL_DEVICE_LIMIT)
//          malloc fails during launches on spilled memory, a new kernel's first one included: the
//          policy's and the layout cache's bookkeeping throw inside the hooks, one from a destructor
//          after the driver took the launch. Must not abort, and later launches and holds go on.
//   ctx-reset  (UVMPOOL_TIERING=auto, a small UVMPOOL_DEVICE_LIMIT) a kernel launched on spilled
//          memory, the primary context reset (cudaDeviceReset), then the old function's handle
//          launched again (the driver may hand the same handle to another kernel): the layout kept for
//          it must have been forgotten with the context, so the hook asks the driver again (which
//          refuses the handle) instead of reading the arguments by the old kernel's layout.
//   fork   the parent allocates and forks; the child calls cuInit, takes a context, allocates and
//          frees an inherited pointer. Whatever each call answers is fine; the child must not die.
//   fork-launch  as fork, once tiering runs in the parent (a kernel launched on pool memory with
//          some of it in host memory): the child loads the module and launches on its own memory, on
//          an inherited pointer, and with the parent's function (the simulator, as a GPU's driver,
//          refuses a child of an initialized process, but the hooks see each launch first). The child dropped the parent's tiering (its pool is gone, its
//          threads are not there); whatever the calls answer, the child must not die or hang.
//   fork-exit N  the parent allocates (so the statistics publisher and, with UVMPOOL_TRACE, the trace
//          writer run) and forks N children one after another, each ending at once with exit(0): the
//          atexit handlers and library destructors run, and under ASan LeakSanitizer's exit check,
//          which takes every lock of the allocator. A child must end within 30 s: a background thread
//          of the parent's inside the allocator at the fork left its lock held in the child for ever.
//          Prints the longest fork() (config::kLongestForkWait bounds its wait for uvmpool's threads).
//   fork-exit-spilling N  as fork-exit, while a thread allocates 48 MiB past a smaller
//          UVMPOOL_DEVICE_LIMIT and frees it over and over: the host reserve's thread pins and
//          releases, and the pool maps host chunks, during the forks (not under ASan: see
//          tests/sanitizer/README.md).
//   init   cuInit only, printing its answer (for settings that leave no driver to reach).
//   stream-destroy  memory freed with cuMemFreeAsync on a stream whose work is held (simulator), then
//          the stream destroyed: uvmpool must record its event on the stream before it goes.
//   vmm    the program's own cuMemMap, cuMemUnmap, cuMemRetainAllocationHandle and cuMemRelease beside
//          the pool (at vmm()).
//   freed  pointer queries on freed memory (a slab's slot, a stitched mapping), which the pool keeps
//          mapped for reuse: answered as the driver answers for a freed cuMemAlloc pointer
//          (cuPointerGetAttribute INVALID_VALUE, cuMemGetAddressRange NOT_FOUND, cuPointerGetAttributes
//          its defaults for a pointer it does not know), not as for the chunk mapped there. The same
//          output with and without uvmpool.
//   race US  a thread makes the first allocation while main returns (exit) about US microseconds
//          after it started: exit races uvmpool starting its trace and statistics segment.
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "linked_client.h"

namespace {

int huge() {
  use_primary_context();
  CUdeviceptr p = 0;
  const CUresult r = cuMemAlloc(&p, std::size_t{1} << 62);
  std::printf("huge: cuMemAlloc(2^62) returned %d\n", int(r));
  CLIENT_CHECK(r != CUDA_SUCCESS, "a 2^62-byte allocation succeeded");
  // The process goes on working.
  CU(cuMemAlloc(&p, 1 << 20));
  CU(cuMemFree(p));
  return 0;
}

// The program's own VMM beside the pool. cuMemUnmap and cuMemMap of pool memory are refused, as the
// driver refuses them for cuMemAlloc memory, and the memory is intact after. Then a cuMemCreate past
// the device limit (made in host memory) freed as NCCL frees its buffers (retain the handle under the
// address, release it, unmap, release again) stays counted against the host limit until the last
// release; and one released as soon as it is mapped, until its unmap.
int vmm() {
  use_primary_context();
  constexpr std::size_t kFull = 64 << 20, kHandle = 8 << 20;
  constexpr long long kCounted = kHandle;
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, kFull));  // the whole UVMPOOL_DEVICE_LIMIT
  CU(cuMemsetD32(p, 0x5a5a5a5a, kFull / 4));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle h = 0, again = 0;
  CU(cuMemCreate(&h, kHandle, &prop, 0));
  const CUresult unmap = cuMemUnmap(p, kFull);
  const CUresult map = cuMemMap(p, kHandle, 0, h, 0);
  std::vector<std::uint32_t> back(kFull / 4);
  CU(cuMemcpyDtoH(back.data(), p, kFull));
  const bool intact = std::all_of(back.begin(), back.end(), [](std::uint32_t v) { return v == 0x5a5a5a5a; });
  std::printf("vmm: unmap of pool memory %d, map into it %d, intact %d\n", int(unmap), int(map), int(intact));
  CLIENT_CHECK(unmap != CUDA_SUCCESS && map != CUDA_SUCCESS && intact, "pool memory was unmapped or mapped over");
  const auto counted = [] { return uvmpool_figure(nullptr, "external_host_bytes"); };
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, kHandle, 0, 0, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemMap(va, kHandle, 0, h, 0));
  CU(cuMemSetAccess(va, kHandle, &access, 1));
  const long long made = counted();
  CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va)));
  CU(cuMemRelease(again));
  const long long released_once = counted();
  CU(cuMemUnmap(va, kHandle));
  const long long unmapped = counted();
  CU(cuMemRelease(h));
  const long long released = counted();
  std::printf("vmm: NCCL's free: counted %lld, after a release %lld, the unmap %lld, the last release %lld\n", made,
              released_once, unmapped, released);
  CLIENT_CHECK(made == kCounted && released_once == made && unmapped == made && released == 0,
               "the handle's host memory was not counted until its last release");
  CU(cuMemCreate(&h, kHandle, &prop, 0));
  CU(cuMemMap(va, kHandle, 0, h, 0));
  CU(cuMemRelease(h));
  const long long mapped_only = counted();
  CU(cuMemUnmap(va, kHandle));
  std::printf("vmm: released while mapped: counted %lld, after the unmap %lld\n", mapped_only, counted());
  CLIENT_CHECK(mapped_only == kCounted && counted() == 0, "the handle's host memory was not counted until its unmap");
  CU(cuMemAddressFree(va, kHandle));
  CU(cuMemFree(p));
  std::printf("vmm: ok\n");
  return 0;
}

int freed() {
  use_primary_context();
  for (const std::size_t bytes : {std::size_t{512}, std::size_t{6} << 20}) {
    CUdeviceptr p = 0, live = 0;
    CU(cuMemAlloc(&p, bytes));
    CU(cuMemAlloc(&live, bytes));  // keeps a slab's chunk (or the pool's space) in use
    CU(cuMemFree(p));
    unsigned type = 77;
    const CUresult one = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 8);
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const CUresult range = cuMemGetAddressRange(&base, &size, p);
    CUcontext owner = reinterpret_cast<CUcontext>(~std::uintptr_t{0});
    void* host = nullptr;
    unsigned long long id = ~0ULL;
    int ordinal = 77, mapped = 77;
    type = 77;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPED};
    void* out[] = {&type, &owner, &host, &id, &ordinal, &mapped};
    const CUresult many = cuPointerGetAttributes(6, which, out, p);
    std::printf("freed %zu bytes: attribute %d, range %d, attributes %d: type %u context %d host %d id %llu ordinal %d mapped %d\n",
                bytes, int(one), int(range), int(many), type, owner == nullptr ? 0 : 1,
                host == reinterpret_cast<void*>(p) ? 1 : 0, id, ordinal, mapped);
    CLIENT_CHECK(one == CUDA_ERROR_INVALID_VALUE && range == CUDA_ERROR_NOT_FOUND && many == CUDA_SUCCESS &&
                     type == 0 && owner == nullptr && id == 0 && ordinal == -2 && mapped == 0,
                 "freed memory was described as an allocation");
    CU(cuMemFree(live));
  }
  std::printf("freed: ok\n");
  return 0;
}

// The simulator's kernel catalog (docs/simulator.md): fill [p, p + 4 * count) with `value`.
CUresult launch_fill(CUfunction fill, CUdeviceptr p, std::uint64_t count, std::uint32_t value) {
  void* params[] = {&p, &count, &value};
  return cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
}

int throw_in_launch() {
  use_primary_context();
  auto fail = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "shim_fail_malloc"));
  CLIENT_CHECK(fail != nullptr, "preload tests/clients/malloc_fail_shim.c first");
  CUmodule module = nullptr;
  CU(cuModuleLoadData(&module, "uvmpool-sim-module 1\n"));
  CUfunction fill = nullptr, touch = nullptr;
  CU(cuModuleGetFunction(&fill, module, "uvmpool_fill_u32"));
  CU(cuModuleGetFunction(&touch, module, "uvmpool_touch"));
  constexpr std::size_t kBytes = 32 << 20;
  CUdeviceptr buffers[4] = {};
  for (CUdeviceptr& b : buffers) CU(cuMemAlloc(&b, kBytes));  // past the limit: some in host memory
  CU(launch_fill(fill, buffers[0], 16, 1));  // fill's layout known, the policy seen the first buffer
  CU(cuCtxSynchronize());
  // Buffers the policy has not seen, and a kernel launched for the first time: each launch's
  // bookkeeping allocates, and fails.
  fail(1);
  const CUresult a = launch_fill(fill, buffers[3], 16, 2);
  CUdeviceptr p = buffers[2];
  std::uint64_t n = 16;
  std::uint32_t passes = 1, write = 0;
  void* params[] = {&p, &n, &passes, &write};
  const CUresult b = cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
  fail(0);
  std::printf("throw-launch: launches with malloc failing returned %d and %d\n", int(a), int(b));
  // Everything goes on: launches, a synchronization (which waits at the host-wait gate while a hold
  // closes it: it must not have been left entered), the data.
  for (int round = 0; round < 4; ++round)
    for (CUdeviceptr x : buffers) CU(launch_fill(fill, x, kBytes / 4, 100 + round));
  CU(cuCtxSynchronize());
  std::uint32_t word = 0;
  for (CUdeviceptr x : buffers) {
    CU(cuMemcpyDtoH(&word, x + kBytes - 4, 4));
    CLIENT_CHECK(word == 103, "a buffer holds %u after the last fill", word);
  }
  for (CUdeviceptr x : buffers) CU(cuMemFree(x));
  CU(cuModuleUnload(module));
  std::printf("throw-launch: ok\n");
  return 0;
}

int ctx_reset() {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CLIENT_CHECK(libcuda != nullptr, "libcuda.so.1 not loaded");
  CUfunction old = nullptr;
  for (int round = 0; round < 2; ++round) {
    use_primary_context();
    CUdeviceptr buffers[3] = {};
    for (CUdeviceptr& b : buffers) CU(cuMemAlloc(&b, 32 << 20));  // past the limit: some in host memory
    if (round == 0) {
      CUmodule module = nullptr;
      CU(cuModuleLoadData(&module, "uvmpool-sim-module 1\n"));
      CU(cuModuleGetFunction(&old, module, "uvmpool_fill_u32"));
      for (CUdeviceptr b : buffers) CU(launch_fill(old, b, 16, 1));
      CU(cuCtxSynchronize());
      // A release that is not the last leaves the context, its modules and their layouts alone.
      CUdevice dev = 0;
      CUcontext again = nullptr;
      CU(cuDeviceGet(&dev, 0));
      CU(cuDevicePrimaryCtxRetain(&again, dev));
      CU(cuDevicePrimaryCtxRelease(dev));
      CU(launch_fill(old, buffers[0], 16, 1));
      const long long kept = uvmpool_figure(libcuda, "param_layouts_asked");
      CLIENT_CHECK(kept == 1, "layouts asked %lld times after a release that was not the last", kept);
    } else {
      const CUresult r = launch_fill(old, buffers[2], 16, 1);
      std::printf("ctx-reset: the old handle after the reset: %d\n", int(r));
      CLIENT_CHECK(r != CUDA_SUCCESS, "a function of a reset context launched");
    }
    std::printf("ctx-reset: round %d, layouts asked %lld\n", round, uvmpool_figure(libcuda, "param_layouts_asked"));
    for (CUdeviceptr b : buffers) CU(cuMemFree(b));
    CUdevice dev = 0;
    CU(cuDeviceGet(&dev, 0));
    if (round == 0) CU(cuDevicePrimaryCtxReset(dev));  // unloads the module with the context
  }
  const long long asked = uvmpool_figure(libcuda, "param_layouts_asked");
  CLIENT_CHECK(asked == 2, "layouts asked %lld times: the first context's was kept past its reset", asked);
  std::printf("ctx-reset: ok\n");
  return 0;
}

int throw_in_hook() {
  use_primary_context();
  auto fail = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "shim_fail_malloc"));
  CLIENT_CHECK(fail != nullptr, "preload tests/clients/malloc_fail_shim.c first");
  CUdeviceptr p = 0;
  fail(1);
  const CUresult r = cuMemAlloc(&p, 1 << 20);  // the first: uvmpool makes its pool here
  fail(0);
  std::printf("throw: cuMemAlloc with malloc failing returned %d\n", int(r));
  CLIENT_CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "expected CUDA_ERROR_OUT_OF_MEMORY");
  CU(cuMemAlloc(&p, 1 << 20));
  CU(cuMemFree(p));
  std::printf("throw: ok\n");
  return 0;
}

// In a forked child: cuInit, the device and its primary context made current, each answer printed.
void child_context() {
  std::printf("child: cuInit %d\n", int(cuInit(0)));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::printf("child: cuDeviceGet %d\n", int(cuDeviceGet(&dev, 0)));
  std::printf("child: cuDevicePrimaryCtxRetain %d\n", int(cuDevicePrimaryCtxRetain(&ctx, dev)));
  std::printf("child: cuCtxSetCurrent %d\n", int(cuCtxSetCurrent(ctx)));
}

// The child's last words; it exits without the atexit handlers (as a worker process may).
[[noreturn]] void child_done() {
  std::printf("child: done\n");
  std::fflush(stdout);
  _exit(0);
}

// The parent: the child must have exited 0, not died.
void wait_for_child(pid_t pid) {
  int status = 0;
  CLIENT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CLIENT_CHECK(!WIFSIGNALED(status), "the child died of signal %d", WTERMSIG(status));
  CLIENT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with %d", WEXITSTATUS(status));
}

int fork_child() {
  use_primary_context();
  CUdeviceptr small = 0, large = 0;
  CU(cuMemAlloc(&small, 4096));
  CU(cuMemAlloc(&large, 8 << 20));
  std::fflush(stdout);
  const pid_t pid = fork();
  CLIENT_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    // The child: every answer is acceptable; only dying is not.
    child_context();
    CUdeviceptr p = 0;
    const CUresult a = cuMemAlloc(&p, 8 << 20);
    std::printf("child: cuMemAlloc %d\n", int(a));
    CUdeviceptr q = 0;
    const CUresult b = cuMemAlloc(&q, 256);
    std::printf("child: cuMemAlloc(small) %d\n", int(b));
    size_t free_b = 0, total = 0;
    std::printf("child: cuMemGetInfo %d\n", int(cuMemGetInfo(&free_b, &total)));
    CUdeviceptr base = 0;
    size_t size = 0;
    std::printf("child: cuMemGetAddressRange(inherited) %d\n", int(cuMemGetAddressRange(&base, &size, large)));
    std::printf("child: cuMemFree(inherited large) %d\n", int(cuMemFree(large)));
    std::printf("child: cuMemFree(inherited small) %d\n", int(cuMemFree(small)));
    std::printf("child: cuMemFreeAsync(inherited) %d\n", int(cuMemFreeAsync(small, nullptr)));
    if (a == CUDA_SUCCESS) std::printf("child: cuMemFree(own) %d\n", int(cuMemFree(p)));
    if (b == CUDA_SUCCESS) std::printf("child: cuMemFree(own small) %d\n", int(cuMemFree(q)));
    child_done();
  }
  wait_for_child(pid);
  // The parent's pool is untouched by the child.
  CU(cuMemFree(large));
  CU(cuMemFree(small));
  std::printf("fork: ok\n");
  return 0;
}


int fork_launch() {
  use_primary_context();
  CUmodule module = nullptr;
  CU(cuModuleLoadData(&module, "uvmpool-sim-module 1\n"));
  CUfunction fill = nullptr;
  CU(cuModuleGetFunction(&fill, module, "uvmpool_fill_u32"));
  // Past UVMPOOL_DEVICE_LIMIT (set by the test): part of it in host memory, so launches are seen.
  CUdeviceptr big = 0;
  CU(cuMemAlloc(&big, 96 << 20));
  CU(launch_fill(fill, big, (96 << 20) / 4, 7));
  CU(cuCtxSynchronize());
  std::fflush(stdout);
  const pid_t pid = fork();
  CLIENT_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    child_context();
    CUmodule m = nullptr;
    CUfunction f = nullptr;
    const CUresult loaded = cuModuleLoadData(&m, "uvmpool-sim-module 1\n");
    std::printf("child: cuModuleLoadData %d\n", int(loaded));
    if (loaded == CUDA_SUCCESS) std::printf("child: cuModuleGetFunction %d\n", int(cuModuleGetFunction(&f, m, "uvmpool_fill_u32")));
    CUdeviceptr own = 0;
    const CUresult a = cuMemAlloc(&own, 96 << 20);
    std::printf("child: cuMemAlloc %d\n", int(a));
    if (f != nullptr && a == CUDA_SUCCESS) std::printf("child: launch on its own %d\n", int(launch_fill(f, own, (96 << 20) / 4, 3)));
    if (f != nullptr) std::printf("child: launch on the inherited %d\n", int(launch_fill(f, big, 16, 5)));
    // The parent's function on the parent's memory: the hooks see a pool pointer whatever the driver says.
    std::printf("child: the parent's launch %d\n", int(launch_fill(fill, big, 16, 5)));
    std::printf("child: cuCtxSynchronize %d\n", int(cuCtxSynchronize()));
    child_done();
  }
  wait_for_child(pid);
  CU(launch_fill(fill, big, (96 << 20) / 4, 9));  // the parent goes on
  CU(cuCtxSynchronize());
  CU(cuMemFree(big));
  std::printf("fork-launch: ok\n");
  return 0;
}

int fork_exit(int forks, bool spilling) {
  const CUcontext ctx = use_primary_context();
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 8 << 20));
  // With spilling, a thread allocates and frees past the device limit all along, so the host
  // reserve's thread pins and releases, and the pool maps host chunks, while the program forks.
  std::atomic<bool> stop{false};
  std::atomic<int> spills{0};
  std::thread churn;
  if (spilling) {
    churn = std::thread([&] {
      CU(cuCtxSetCurrent(ctx));
      while (!stop) {
        CUdeviceptr q = 0;
        CU(cuMemAlloc(&q, 48 << 20));
        CU(cuMemsetD8(q, 7, 48 << 20));
        CU(cuMemFree(q));
        spills.fetch_add(1);
      }
    });
    while (spills == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fflush(stdout);
  std::chrono::steady_clock::duration longest{};
  for (int i = 0; i < forks; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid > 0) longest = std::max(longest, std::chrono::steady_clock::now() - start);
    CLIENT_CHECK(pid >= 0, "fork failed");
    if (pid == 0) std::exit(0);
    int status = 0;
    pid_t got = 0;
    for (int waited_ms = 0; (got = waitpid(pid, &status, WNOHANG)) == 0 && waited_ms < 30000; waited_ms += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      CLIENT_CHECK(false, "fork %d of %d: the child did not end in 30 s (hung at exit)", i + 1, forks);
    }
    CLIENT_CHECK(got == pid && !WIFSIGNALED(status), "fork %d: the child died", i + 1);
  }
  stop = true;
  if (churn.joinable()) churn.join();
  CU(cuMemFree(p));
  std::printf("fork-exit: ok, %d children ended (%d spilling allocations meanwhile), the longest fork %.1f ms\n", forks,
              spills.load(), std::chrono::duration<double, std::milli>(longest).count());
  return 0;
}

int init_only() {
  const CUresult r = cuInit(0);
  std::printf("init: cuInit returned %d\n", int(r));
  CUdeviceptr p = 0;
  std::printf("init: cuMemAlloc returned %d\n", int(cuMemAlloc(&p, 1 << 20)));
  int count = -1;
  std::printf("init: cuDeviceGetCount returned %d\n", int(cuDeviceGetCount(&count)));
  return 0;
}

// The simulator's controls (src/sim/sim_control.h), found in the process's libcuda.so.1.
template <typename F>
F sim_control(const char* name) {
  auto f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  CLIENT_CHECK(f != nullptr, "no %s: run on the simulated driver", name);
  return f;
}

int stream_destroy() {
  use_primary_context();
  auto hold = sim_control<void (*)(CUstream, int)>("uvmpool_sim_hold_stream");
  auto calls = sim_control<unsigned long long (*)(const char*)>("uvmpool_sim_call_count");
  auto violations = sim_control<unsigned long long (*)()>("uvmpool_sim_violations");
  CUstream a = nullptr, b = nullptr;
  CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  const size_t bytes = 4 << 20;
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, bytes, a));
  hold(a, 1);
  CU(cuMemsetD8Async(p, 1, bytes, a));  // in flight on a when a goes
  CU(cuMemFreeAsync(p, a));
  const unsigned long long records = calls("cuEventRecord");
  hold(a, 0);
  CU(cuStreamDestroy(a));
  std::printf("stream-destroy: cuEventRecord calls during cuStreamDestroy: %llu\n", calls("cuEventRecord") - records);
  CLIENT_CHECK(calls("cuEventRecord") == records + 1, "uvmpool recorded no event on the stream before it was destroyed");
  CUdeviceptr q = 0;
  CU(cuMemAllocAsync(&q, bytes, b));
  CU(cuMemsetD8Async(q, 2, bytes, b));
  CU(cuMemFreeAsync(q, b));
  CU(cuStreamSynchronize(b));
  CU(cuStreamDestroy(b));
  CLIENT_CHECK(violations() == 0, "%llu race-detector violations", violations());
  std::printf("stream-destroy: ok\n");
  return 0;
}

int race(int delay_us) {
  CU(cuInit(0));
  std::printf("pid %d\n", int(getpid()));
  std::fflush(stdout);
  static std::atomic<bool> going{false};
  std::thread([] {
    CUdevice dev;
    CUcontext ctx;
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    going.store(true);
    CUdeviceptr p = 0;
    for (;;) {  // until exit ends the process
      if (cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS) cuMemFree(p);
    }
  }).detach();
  while (!going.load()) {
  }
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  std::exit(0);  // with the allocating thread still running
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "huge") == 0) return huge();
  if (std::strcmp(mode, "fork") == 0) return fork_child();
  if (std::strcmp(mode, "fork-launch") == 0) return fork_launch();
  if (std::strcmp(mode, "fork-exit") == 0) return fork_exit(argc > 2 ? std::atoi(argv[2]) : 1, false);
  if (std::strcmp(mode, "fork-exit-spilling") == 0) return fork_exit(argc > 2 ? std::atoi(argv[2]) : 1, true);
  if (std::strcmp(mode, "throw") == 0) return throw_in_hook();
  if (std::strcmp(mode, "throw-launch") == 0) return throw_in_launch();
  if (std::strcmp(mode, "ctx-reset") == 0) return ctx_reset();
  if (std::strcmp(mode, "init") == 0) return init_only();
  if (std::strcmp(mode, "stream-destroy") == 0) return stream_destroy();
  if (std::strcmp(mode, "race") == 0) return race(argc > 2 ? std::atoi(argv[2]) : 0);
  if (std::strcmp(mode, "vmm") == 0) return vmm();
  if (std::strcmp(mode, "freed") == 0) return freed();
  std::fprintf(stderr, "usage: client_hardening huge|throw|throw-launch|ctx-reset|fork|fork-launch|init|stream-destroy|race US|vmm|freed\n");
  return 2;
}
