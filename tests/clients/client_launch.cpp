// A runtime-like program (every driver function from cuGetProcAddress, as the CUDA runtime gets them)
// that spills past UVMPOOL_DEVICE_LIMIT and launches a kernel on the spilled memory through each
// launch route: cuLaunchKernel, its per-thread variant, cuLaunchKernelEx and cuLaunchCooperativeKernel,
// in the kernelParams and the extra forms; then copies and memsets there (the transfer hooks: each
// is a touch too), flat, into a CUDA array and back, strided, peer and batched (flat and 3D), and one memset on the device part; then captures a fill and a memset there on a
// stream into a graph (cuGraphInstantiateWithFlags) and launches the graph twice. It
// checks every result, then prints what uvmpool's statistics say the hooks saw, for the hooks tests
// (tests/hooks/CMakeLists.txt) to match:
//   launch client: ok; hook calls <n>; launches_read <n>; launches_in_place <n>; launch_host_pointers <n>;
//   transfers_read <n>; transfers_in_place <n>; graph hook calls <n>; launches_captured <n>;
//   graph_launches_read <n>
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
  auto array_create = resolve<s::cuArrayCreate_v2>("cuArrayCreate", 3020);
  auto array_destroy = resolve<s::cuArrayDestroy>("cuArrayDestroy", 2000);
  auto dtoa = resolve<s::cuMemcpyDtoA_v2>("cuMemcpyDtoA", 3020);
  auto atod = resolve<s::cuMemcpyAtoD_v2>("cuMemcpyAtoD", 3020);
  auto memset2d_async = resolve<s::cuMemsetD2D32Async>("cuMemsetD2D32Async", 3020);
  auto copy2d = resolve<s::cuMemcpy2D_v2>("cuMemcpy2D", 3020);
  auto peer_async = resolve<s::cuMemcpyPeerAsync>("cuMemcpyPeerAsync", 4000);
  auto batch_async = resolve<s::cuMemcpyBatchAsync_v2>("cuMemcpyBatchAsync", 13000);
  auto batch_3d_async = resolve<s::cuMemcpy3DBatchAsync_v2>("cuMemcpy3DBatchAsync", 13000);
  auto current = resolve<s::cuCtxGetCurrent>("cuCtxGetCurrent", 4000);
  auto stream_create = resolve<s::cuStreamCreate>("cuStreamCreate", 2000);
  auto stream_sync = resolve<s::cuStreamSynchronize>("cuStreamSynchronize", 2000);
  auto stream_destroy = resolve<s::cuStreamDestroy_v2>("cuStreamDestroy", 4000);
  auto begin_capture = resolve<s::cuStreamBeginCapture_v2>("cuStreamBeginCapture", 10010);
  auto end_capture = resolve<s::cuStreamEndCapture>("cuStreamEndCapture", 10000);
  auto instantiate = resolve<s::cuGraphInstantiateWithFlags>("cuGraphInstantiateWithFlags", 11040);
  auto graph_launch = resolve<s::cuGraphLaunch>("cuGraphLaunch", 10000);
  auto exec_destroy = resolve<s::cuGraphExecDestroy>("cuGraphExecDestroy", 10000);
  auto graph_destroy = resolve<s::cuGraphDestroy>("cuGraphDestroy", 10000);

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

  // Into a CUDA array and back to the spilled tail, then a copy out to check it (3 transfers, in place).
  {
    CUDA_ARRAY_DESCRIPTOR desc{};
    desc.Width = 1024;
    desc.Format = CU_AD_FORMAT_UNSIGNED_INT32;
    desc.NumChannels = 1;
    CUarray array = nullptr;
    CU(array_create(&array, &desc));
    const CUdeviceptr back = tail + 40 * 4096;
    CU(dtoa(array, 0, at, 4096));
    CU(atod(back, array, 0, 4096));
    std::vector<std::uint32_t> got(1024);
    CU(dtoh(got.data(), back, 4096));
    for (std::uint32_t v : got) CLIENT_CHECK(v == expected[0], "the copy through an array left %#x", v);
    CU(array_destroy(array));
  }

  // The strided, peer and batched transfers (5, all in place), then one copy out to check them: 4 rows
  // of 256 bytes set 1024 apart, copied as rows to the next 4 KiB, on by a peer copy, on by a batch,
  // on as rows by a 3D batch.
  const CUdeviceptr strided = tail + 32 * 4096;
  CUstream batch_stream = nullptr;
  CU(stream_create(&batch_stream, CU_STREAM_NON_BLOCKING));
  CU(memset8(strided, 0, 5 * 4096));
  CU(memset2d_async(strided, 1024, 0x600DF00Du, 64, 4, nullptr));
  CUDA_MEMCPY2D rows{};
  rows.srcMemoryType = rows.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  rows.srcDevice = strided;
  rows.dstDevice = strided + 4096;
  rows.srcPitch = rows.dstPitch = 1024;
  rows.WidthInBytes = 256;
  rows.Height = 4;
  CU(copy2d(&rows));
  CUcontext context = nullptr;
  CU(current(&context));
  CU(peer_async(strided + 2 * 4096, context, strided + 4096, context, 4096, nullptr));
  CU(sync());
  CUdeviceptr batch_dst = strided + 3 * 4096, batch_src = strided + 2 * 4096;
  std::size_t batch_bytes = 4096, first_attribute = 0;
  CUmemcpyAttributes attributes{};
  attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CU(batch_async(&batch_dst, &batch_src, &batch_bytes, 1, &attributes, &first_attribute, 1, batch_stream));
  CUDA_MEMCPY3D_BATCH_OP rows_3d{};
  rows_3d.src.type = rows_3d.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  rows_3d.src.op.ptr.ptr = strided + 3 * 4096;
  rows_3d.dst.op.ptr.ptr = strided + 4 * 4096;
  rows_3d.src.op.ptr.rowLength = rows_3d.dst.op.ptr.rowLength = 1024;
  rows_3d.extent = {256, 4, 1};
  rows_3d.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CU(batch_3d_async(1, &rows_3d, 0, batch_stream));
  CU(stream_sync(batch_stream));
  CU(stream_destroy(batch_stream));
  {
    std::vector<std::uint32_t> got(1024);
    CU(dtoh(got.data(), strided + 4 * 4096, 4096));
    for (std::size_t i = 0; i < got.size(); ++i)
      CLIENT_CHECK(got[i] == (i % 256 < 64 ? 0x600DF00Du : 0u), "strided transfers left %#x at %zu", got[i], i);
  }

  // A graph captured on a stream: a fill and a memset of the spilled tail, which run only when it is
  // launched (the tail is cleared in between to tell).
  const CUdeviceptr graphed = tail + 12 * 4096;
  CUstream stream = nullptr;
  CU(stream_create(&stream, CU_STREAM_NON_BLOCKING));
  CU(memset8(graphed, 0, 2 * 4096));
  CU(begin_capture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  {
    CUdeviceptr dst = graphed;
    std::uint32_t value = 300;
    void* params[] = {&dst, &count, &value};
    CU(launch(fill, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr));
    // Refused (no graph pointer), the capture goes on: what follows is still captured, not run.
    CLIENT_CHECK(end_capture(stream, nullptr) == CUDA_ERROR_INVALID_VALUE, "an end of capture with no graph pointer");
    CU(memset32_async(graphed + 4096, 301, 1024, stream));
  }
  CUgraph graph = nullptr;
  CU(end_capture(stream, &graph));
  CUgraphExec exec = nullptr;
  CU(instantiate(&exec, graph, 0));
  for (int run = 0; run < 2; ++run) {
    CU(stream_sync(stream));
    std::vector<std::uint32_t> got(2048);
    CU(dtoh(got.data(), graphed, 2 * 4096));
    for (std::uint32_t v : got) CLIENT_CHECK(v == 0, "captured work ran before its graph: %u", v);
    CU(graph_launch(exec, stream));
    CU(stream_sync(stream));
    CU(dtoh(got.data(), graphed, 2 * 4096));
    for (std::size_t i = 0; i < got.size(); ++i)
      CLIENT_CHECK(got[i] == (i < 1024 ? 300u : 301u), "graph run %d left %u at %zu", run, got[i], i);
    CU(memset8(graphed, 0, 2 * 4096));
  }
  CU(exec_destroy(exec));
  CU(graph_destroy(graph));
  CU(stream_destroy(stream));
  CU(unload(module));
  CU(mem_free(buffer));

  const unsigned long long hook_calls = uvmpool_calls(libcuda, "cuLaunchKernel") + uvmpool_calls(libcuda, "cuLaunchKernelEx") +
                                        uvmpool_calls(libcuda, "cuLaunchCooperativeKernel");
  const unsigned long long graph_calls = uvmpool_calls(libcuda, "cuStreamBeginCapture_v2") +
                                         uvmpool_calls(libcuda, "cuStreamEndCapture") +
                                         uvmpool_calls(libcuda, "cuGraphInstantiateWithFlags") +
                                         uvmpool_calls(libcuda, "cuGraphLaunch");
  std::printf("launch client: ok; hook calls %llu; launches_read %lld; launches_in_place %lld; launch_host_pointers %lld; "
              "transfers_read %lld; transfers_in_place %lld; graph hook calls %llu; launches_captured %lld; "
              "graph_launches_read %lld\n",
              hook_calls, uvmpool_figure(libcuda, "launches_read"), uvmpool_figure(libcuda, "launches_in_place"),
              uvmpool_figure(libcuda, "launch_host_pointers"), uvmpool_figure(libcuda, "transfers_read"),
              uvmpool_figure(libcuda, "transfers_in_place"), graph_calls, uvmpool_figure(libcuda, "launches_captured"),
              uvmpool_figure(libcuda, "graph_launches_read"));
  return 0;
}
