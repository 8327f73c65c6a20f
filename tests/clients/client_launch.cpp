// A runtime-like program (every driver function from cuGetProcAddress, as the CUDA runtime gets them)
// that spills past UVMPOOL_DEVICE_LIMIT and launches a kernel on the spilled memory through each
// launch route: cuLaunchKernel, its per-thread variant, cuLaunchKernelEx and cuLaunchCooperativeKernel,
// in the kernelParams and the extra forms; then copies and memsets there (the transfer hooks: each
// is a touch too) and one memset on the device part. It checks every result, then prints what
// uvmpool's statistics say the hooks saw, for the hooks tests (tests/hooks/CMakeLists.txt) to match:
//   launch client: ok; hook calls <n>; launches_read <n>; launches_in_place <n>; launch_host_pointers <n>;
//   transfers_read <n>; transfers_in_place <n>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "getproc_client.h"

int main() {
  CUdevice dev = 0;
  void* libcuda = open_driver_as_runtime(&dev);
  namespace s = uvmpool::driver::sig;
  auto mem_alloc = resolve<s::cuMemAlloc_v2>("cuMemAlloc", 3020);
  auto mem_free = resolve<s::cuMemFree_v2>("cuMemFree", 3020);
  auto dtoh = resolve<s::cuMemcpyDtoH_v2>("cuMemcpyDtoH", 3020);
  auto sync = resolve<s::cuCtxSynchronize>("cuCtxSynchronize", 2000);
  auto load = resolve<s::cuModuleLoadData>("cuModuleLoadData", 2000);
  auto get_function = resolve<s::cuModuleGetFunction>("cuModuleGetFunction", 2000);
  auto unload = resolve<s::cuModuleUnload>("cuModuleUnload", 2000);
  auto launch = resolve<s::cuLaunchKernel>("cuLaunchKernel", 4000);
  auto launch_ptsz = resolve<s::cuLaunchKernel_ptsz>("cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  auto launch_ex = resolve<s::cuLaunchKernelEx>("cuLaunchKernelEx", 11060);
  auto launch_coop = resolve<s::cuLaunchCooperativeKernel>("cuLaunchCooperativeKernel", 9000);
  auto memset32_async = resolve<s::cuMemsetD32Async>("cuMemsetD32Async", 3020);
  auto memset16_async_ptsz =
      resolve<s::cuMemsetD16Async_ptsz>("cuMemsetD16Async", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  auto memset8 = resolve<s::cuMemsetD8_v2>("cuMemsetD8", 3020);
  auto dtod_async = resolve<s::cuMemcpyDtoDAsync_v2>("cuMemcpyDtoDAsync", 3020);

  // Past the limit the test sets (UVMPOOL_DEVICE_LIMIT=64M): the last chunk lies in host memory.
  constexpr std::size_t kBytes = 96u << 20;
  CUdeviceptr buffer = 0;
  CU(mem_alloc(&buffer, kBytes));
  CUmodule module = nullptr;
  CU(load(&module, "uvmpool-sim-module 1\n"));
  CUfunction fill = nullptr;
  CU(get_function(&fill, module, "uvmpool_fill_u32"));

  // Each route fills its own 4 KiB of the last MiB with its own value.
  const CUdeviceptr tail = buffer + kBytes - (1u << 20);
  std::uint64_t count = 1024;
  for (std::uint32_t route = 0; route < 5; ++route) {
    CUdeviceptr dst = tail + route * 4096;
    std::uint32_t value = 100 + route;
    void* params[] = {&dst, &count, &value};
    struct {
      CUdeviceptr dst;
      std::uint64_t count;
      std::uint32_t value, pad;
    } packed{dst, count, value, 0};
    std::size_t size = sizeof packed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUlaunchConfig config{};
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 32;
    config.blockDimY = config.blockDimZ = 1;
    switch (route) {
      case 0: CU(launch(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr)); break;
      case 1: CU(launch(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra)); break;
      case 2: CU(launch_ptsz(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr)); break;
      case 3: CU(launch_ex(&config, fill, params, nullptr)); break;
      case 4: CU(launch_coop(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params)); break;
    }
  }
  CU(sync());
  for (std::uint32_t route = 0; route < 5; ++route) {
    std::vector<std::uint32_t> got(count);
    CU(dtoh(got.data(), tail + route * 4096, count * 4));
    for (std::uint32_t v : got) CLIENT_CHECK(v == 100 + route, "route %u wrote %u", route, v);
  }

  // Copies and memsets on the spilled tail (4 transfers, then 4 copies out to check them: all in
  // place), and a memset on the device part (read, not in place).
  const CUdeviceptr at = tail + 8 * 4096;
  CU(memset32_async(at, 0xAABBCCDDu, 1024, nullptr));
  CU(memset16_async_ptsz(at + 4096, 0x1234, 2048, nullptr));
  CU(memset8(at + 2 * 4096, 0x5A, 4096));
  CU(dtod_async(at + 3 * 4096, at, 4096, nullptr));
  CU(memset8(buffer, 0x11, 4096));
  CU(sync());
  const std::uint32_t expected[] = {0xAABBCCDDu, 0x12341234u, 0x5A5A5A5Au, 0xAABBCCDDu};
  for (int i = 0; i < 4; ++i) {
    std::vector<std::uint32_t> got(1024);
    CU(dtoh(got.data(), at + i * 4096, 4096));
    for (std::uint32_t v : got) CLIENT_CHECK(v == expected[i], "transfer %d left %#x", i, v);
  }
  CU(unload(module));
  CU(mem_free(buffer));

  const unsigned long long hook_calls = uvmpool_calls(libcuda, "cuLaunchKernel") + uvmpool_calls(libcuda, "cuLaunchKernelEx") +
                                        uvmpool_calls(libcuda, "cuLaunchCooperativeKernel");
  std::printf("launch client: ok; hook calls %llu; launches_read %lld; launches_in_place %lld; launch_host_pointers %lld; "
              "transfers_read %lld; transfers_in_place %lld\n",
              hook_calls, uvmpool_figure(libcuda, "launches_read"), uvmpool_figure(libcuda, "launches_in_place"),
              uvmpool_figure(libcuda, "launch_host_pointers"), uvmpool_figure(libcuda, "transfers_read"),
              uvmpool_figure(libcuda, "transfers_in_place"));
  return 0;
}
