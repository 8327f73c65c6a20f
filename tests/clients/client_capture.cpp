// A runtime-like program (every driver function from cuGetProcAddress) that frees memory during a
// graph capture: one thread captures a stream in global mode (PyTorch's default) while another, in the
// relaxed interaction mode (which the driver lets free during a global capture), allocates and frees.
// Under UVMPOOL_GUARD=1 every free unmaps at once, after the pool's wait for the device, a
// cuCtxSynchronize that the driver refuses during any capture of the context and that spoils it
// (tests/fidelity/capture_test.cpp). So the pool holds a free made during a capture in the
// allocation's context until the capture is over (src/pool/held_frees.h). To the program it is freed
// at once, as the driver's would be: cuMemGetAddressRange answers NOT_FOUND (500) during the capture,
// though the memory stays mapped, and an error after the capture's end too (the guarded range is
// unmapped). Prints, for tests/hooks/CMakeLists.txt:
//   capture client: ok; status after the free <n>; end <CUresult>; range during <CUresult> after <CUresult>
#include <dlfcn.h>

#include <thread>

#include "getproc_client.h"

int main() {
  CUdevice dev = 0;
  void* libcuda = open_driver_as_runtime(&dev);
  namespace s = uvmpool::driver::sig;
  auto mem_alloc = resolve<s::cuMemAlloc_v2>("cuMemAlloc", 3020);
  auto mem_free = resolve<s::cuMemFree_v2>("cuMemFree", 3020);
  auto current = resolve<s::cuCtxGetCurrent>("cuCtxGetCurrent", 4000);
  auto set_current = resolve<s::cuCtxSetCurrent>("cuCtxSetCurrent", 4000);
  auto exchange_mode = resolve<s::cuThreadExchangeStreamCaptureMode>("cuThreadExchangeStreamCaptureMode", 10010);
  auto stream_create = resolve<s::cuStreamCreate>("cuStreamCreate", 2000);
  auto stream_destroy = resolve<s::cuStreamDestroy_v2>("cuStreamDestroy", 4000);
  auto begin_capture = resolve<s::cuStreamBeginCapture_v2>("cuStreamBeginCapture", 10010);
  auto end_capture = resolve<s::cuStreamEndCapture>("cuStreamEndCapture", 10000);
  auto is_capturing = resolve<s::cuStreamIsCapturing>("cuStreamIsCapturing", 10000);
  auto graph_destroy = resolve<s::cuGraphDestroy>("cuGraphDestroy", 10000);
  auto address_range = resolve<s::cuMemGetAddressRange_v2>("cuMemGetAddressRange", 3020);

  CUcontext ctx = nullptr;
  CU(current(&ctx));
  CUstream stream = nullptr;
  CU(stream_create(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr before = 0;
  CU(mem_alloc(&before, 4u << 20));
  CU(mem_free(before));  // freed (and, guarded, unmapped) before the capture

  CU(begin_capture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  CUresult range_during = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    CU(set_current(ctx));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(exchange_mode(&mode));
    CU(mem_alloc(&p, 4u << 20));
    CU(mem_free(p));  // guarded: unmapped at once, but for the capture
    range_during = address_range(nullptr, nullptr, p);
  }).join();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CU(is_capturing(stream, &status));
  CUgraph graph = nullptr;
  const CUresult ended = end_capture(stream, &graph);
  if (graph != nullptr) CU(graph_destroy(graph));
  const CUresult range_after = address_range(nullptr, nullptr, p);
  CU(stream_destroy(stream));
  std::printf("capture client: ok; status after the free %d; end %d; range during %d after %d\n", static_cast<int>(status),
              static_cast<int>(ended), static_cast<int>(range_during), static_cast<int>(range_after));
  dlclose(libcuda);
  return 0;
}
