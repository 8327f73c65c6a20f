// A program that reaches the driver the way the CUDA runtime does (and so PyTorch, CuPy and JAX):
// dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2"), then every function through
// cuGetProcAddress, with CUDA versions and per-thread-stream flags. It allocates, fills and verifies
// device memory; with --expect-uvmpool it also checks that the allocations reached uvmpool.
//   --old-dlsym        call dlsym through its GLIBC_2.2.5 symbol version (programs built on old glibc)
//   --expect-uvmpool   fail unless the hooks saw the allocations
//   --expect-disabled  fail unless uvmpool is loaded but handed out no hook (UVMPOOL_DISABLE=1)
//   --dropin           uvmpool is the libcuda.so.1 itself (no dlsym override involved)
//   --check-routes     also call every hook through each route and check that it counted
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "getproc_client.h"

// The GLIBC_2.2.5 version of dlsym, as a program linked against glibc < 2.34 would bind it.
extern "C" void* dlsym_glibc_2_2_5(void*, const char*);
__asm__(".symver dlsym_glibc_2_2_5, dlsym@GLIBC_2.2.5");

namespace {

// Every hook but the launches, the batched copies and prefetches, the asynchronous peer copy, the
// asynchronous pitched memsets and three graph node calls takes at most five integer or pointer
// arguments; called with zeros it must answer with an error code (or success for frees of 0), never crash.
using AnyHook = CUresult (*)(std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t);
using AnyHook6 =
    CUresult (*)(std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t);

// Calls `fn`, the hook of `symbol`, with every argument zero in its own arity: the launches take up to
// eleven arguments, the batched copies nine, and a five-argument call would hand the driver register
// or stack garbage as the rest.
CUresult call_with_nulls(const char* symbol, void* fn) {
  namespace s = uvmpool::driver::sig;
  const std::string_view name(symbol);
  if (name.starts_with("cuLaunchKernelEx")) return reinterpret_cast<s::cuLaunchKernelEx>(fn)(nullptr, nullptr, nullptr, nullptr);
  if (name.starts_with("cuLaunchKernel"))
    return reinterpret_cast<s::cuLaunchKernel>(fn)(nullptr, 0, 0, 0, 0, 0, 0, 0, nullptr, nullptr, nullptr);
  if (name.starts_with("cuLaunchCooperativeKernel"))
    return reinterpret_cast<s::cuLaunchCooperativeKernel>(fn)(nullptr, 0, 0, 0, 0, 0, 0, 0, nullptr, nullptr);
  if (name.starts_with("cuMemcpyBatchAsync_v2"))
    return reinterpret_cast<s::cuMemcpyBatchAsync_v2>(fn)(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr);
  if (name.starts_with("cuMemcpyBatchAsync"))
    return reinterpret_cast<s::cuMemcpyBatchAsync>(fn)(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr);
  if (name.starts_with("cuMemPrefetchBatchAsync"))
    return reinterpret_cast<s::cuMemPrefetchBatchAsync>(fn)(nullptr, nullptr, 0, nullptr, nullptr, 0, 0, nullptr);
  if (name.starts_with("cuMemcpyPeerAsync"))
    return reinterpret_cast<s::cuMemcpyPeerAsync>(fn)(0, nullptr, 0, nullptr, 0, nullptr);
  if (name.starts_with("cuMemsetD2D") && name.find("Async") != std::string_view::npos)
    return reinterpret_cast<s::cuMemsetD2D32Async>(fn)(0, 0, 0, 0, 0, nullptr);  // the value's width aside, alike
  // A wait or write of a word: given flags no driver takes, so nothing is queued on address 0 (a zero
  // flags word is a valid wait, and a wait or write reaching address 0 would fault the context later).
  if (name.starts_with("cuStreamWaitValue") || name.starts_with("cuStreamWriteValue"))
    return reinterpret_cast<AnyHook>(fn)(0, 0, 0, 0xffffffffu, 0);
  // Six arguments: a context last, or the generic node's edge data and parameters. Measured on the H200
  // (driver 580.159.04): cuGraphAddMemcpyNode given five zeros and a garbage sixth crashes in the driver.
  if (name == "cuGraphAddMemcpyNode" || name == "cuGraphAddMemsetNode" || name == "cuGraphAddNode_v2")
    return reinterpret_cast<AnyHook6>(fn)(0, 0, 0, 0, 0, 0);
  return reinterpret_cast<AnyHook>(fn)(0, 0, 0, 0, 0);
}

void expect_counts(void* libcuda, const char* route, const char* symbol, void* fn) {
  CLIENT_CHECK(fn != nullptr, "route %s gave no %s", route, symbol);
  std::fprintf(stderr, "calling %s through %s with null arguments\n", symbol, route);  // names a crash
  const auto before = uvmpool_calls(libcuda, symbol);
  (void)call_with_nulls(symbol, fn);
  const auto after = uvmpool_calls(libcuda, symbol);
  CLIENT_CHECK(after == before + 1, "route %s: calling %s did not reach its hook (%llu -> %llu)", route, symbol,
               before, after);
}

void check_routes(void* libcuda, bool dropin) {
  using namespace uvmpool::driver;
  int checked = 0;
  for (const FunctionInfo& f : kFunctions) {
    if (f.kind != Kind::Hook) continue;
    const cuuint64_t flags = f.flavor == Flavor::PerThread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                            : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    void* p = nullptr;
    CUdriverProcAddressQueryResult found{};
    CLIENT_CHECK(get_proc(f.base, &p, f.version, flags, &found) == CUDA_SUCCESS, "resolving %s", f.symbol);
    expect_counts(libcuda, "cuGetProcAddress", f.symbol, p);
    expect_counts(libcuda, "dlsym(libcuda)", f.symbol, dlsym(libcuda, f.symbol));
    if (!dropin) expect_counts(libcuda, "exported symbol", f.symbol, dlsym(RTLD_DEFAULT, f.symbol));
    ++checked;
  }
  std::printf("runtime-like client: every one of %d hooks reached through each route\n", checked);
}

}  // namespace

int main(int argc, char** argv) {
  const bool expect_uvmpool = has_flag(argc, argv, "--expect-uvmpool");
  const bool expect_disabled = has_flag(argc, argv, "--expect-disabled");
  const bool dropin = has_flag(argc, argv, "--dropin");

  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CLIENT_CHECK(libcuda != nullptr, "dlopen(libcuda.so.1): %s", dlerror());
  void* entry = has_flag(argc, argv, "--old-dlsym") ? dlsym_glibc_2_2_5(libcuda, "cuGetProcAddress_v2")
                                                    : dlsym(libcuda, "cuGetProcAddress_v2");
  CLIENT_CHECK(entry != nullptr, "no cuGetProcAddress_v2");
  get_proc = reinterpret_cast<GetProc>(entry);
  get_proc = resolve<GetProc>("cuGetProcAddress", 12000);  // the runtime asks for it through itself

  auto cuInit = resolve<CUresult (*)(unsigned)>("cuInit", 2000);
  auto cuDeviceGet = resolve<CUresult (*)(CUdevice*, int)>("cuDeviceGet", 2000);
  auto cuPrimaryRetain = resolve<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain", 7000);
  auto cuCtxSetCurrent = resolve<CUresult (*)(CUcontext)>("cuCtxSetCurrent", 4000);
  auto cuMemAlloc = resolve<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc", 12000);
  auto cuMemFree = resolve<CUresult (*)(CUdeviceptr)>("cuMemFree", 12000);
  auto cuMemsetD32 = resolve<CUresult (*)(CUdeviceptr, unsigned, size_t)>("cuMemsetD32", 12000);
  auto cuMemcpyDtoH = resolve<CUresult (*)(void*, CUdeviceptr, size_t)>("cuMemcpyDtoH", 12000);
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  auto cuMemAllocAsync = resolve<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync", 12000, per_thread);
  auto cuMemFreeAsync = resolve<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync", 12000, per_thread);
  auto cuMemsetD32Async =
      resolve<CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream)>("cuMemsetD32Async", 12000, per_thread);
  auto cuStreamSynchronize = resolve<CUresult (*)(CUstream)>("cuStreamSynchronize", 12000, per_thread);

  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuPrimaryRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));

  const size_t words = (4u << 20) / 4;
  CUdeviceptr d = 0, a = 0;
  CU(cuMemAlloc(&d, words * 4));
  CU(cuMemsetD32(d, 0xabcd1234u, words));
  CU(cuMemAllocAsync(&a, 1u << 20, nullptr));  // stream 0 of the per-thread variant
  CU(cuMemsetD32Async(a, 0x5a5a5a5au, (1u << 20) / 4, nullptr));
  CU(cuStreamSynchronize(nullptr));
  std::vector<unsigned> host(words);
  CU(cuMemcpyDtoH(host.data(), d, words * 4));
  for (size_t i = 0; i < words; ++i) CLIENT_CHECK(host[i] == 0xabcd1234u, "word %zu reads %08x", i, host[i]);
  CU(cuMemcpyDtoH(host.data(), a, 1u << 20));
  CLIENT_CHECK(host[0] == 0x5a5a5a5au && host[(1u << 18) - 1] == 0x5a5a5a5au, "async buffer reads %08x", host[0]);
  CU(cuMemFreeAsync(a, nullptr));
  CU(cuStreamSynchronize(nullptr));
  CU(cuMemFree(d));

  uvmpool_stats s{};
  const bool loaded = read_uvmpool_stats(libcuda, &s);
  if (expect_uvmpool) {
    CLIENT_CHECK(loaded, "uvmpool is not loaded");
    CLIENT_CHECK(uvmpool_calls(libcuda, "cuMemAlloc_v2") >= 1, "cuMemAlloc did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(libcuda, "cuMemAllocAsync_ptsz") >= 1, "cuMemAllocAsync_ptsz did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(libcuda, "cuMemFreeAsync_ptsz") >= 1, "cuMemFreeAsync_ptsz did not reach uvmpool");
    CLIENT_CHECK(uvmpool_calls(libcuda, "cuMemFree_v2") >= 1, "cuMemFree did not reach uvmpool");
    CLIENT_CHECK(s.resolved_via_getproc >= 4, "only %llu hooks via cuGetProcAddress", s.resolved_via_getproc);
    if (dropin)
      CLIENT_CHECK(s.calls_via_export >= 1, "the drop-in's own cuGetProcAddress_v2 was not called");
    else
      CLIENT_CHECK(s.resolved_via_dlsym >= 1, "the dlsym override handed out nothing");
    if (has_flag(argc, argv, "--check-routes")) check_routes(libcuda, dropin);
  }
  if (expect_disabled) {
    CLIENT_CHECK(loaded, "uvmpool is not loaded");
    CLIENT_CHECK(s.allocations == 0 && s.resolved_via_dlsym == 0 && s.resolved_via_getproc == 0,
                 "UVMPOOL_DISABLE=1 but uvmpool intercepted %llu allocations", s.allocations);
  }
  std::printf("runtime-like client: ok; uvmpool %s: %llu allocations, %llu frees, hooks via dlsym %llu, "
              "via cuGetProcAddress %llu\n",
              loaded ? "loaded" : "not loaded", s.allocations, s.frees, s.resolved_via_dlsym, s.resolved_via_getproc);
  return 0;
}
