// A runtime-like program (every driver function from cuGetProcAddress) that captures a graph while
// the pool unmaps memory freed during the capture: one thread captures a stream in global mode
// (PyTorch's default) while another, in the relaxed interaction mode (which the driver lets free
// during a global capture), allocates and frees. Under UVMPOOL_GUARD=1 every free unmaps at once, after
// the pool's wait for the device, a cuCtxSynchronize that the driver refuses during any capture of the
// context and that spoils it (tests/fidelity/capture_test.cpp): the pool leaves that wait for after the
// capture (src/pool/captures.h). Prints, for tests/hooks/CMakeLists.txt:
//   capture client: ok; status after the unmap <n>; end <CUresult>
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

  CUcontext ctx = nullptr;
  CU(current(&ctx));
  CUstream stream = nullptr;
  CU(stream_create(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr before = 0;
  CU(mem_alloc(&before, 4u << 20));
  CU(mem_free(before));  // freed (and, guarded, unmapped) before the capture

  CU(begin_capture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  std::thread([&] {
    CU(set_current(ctx));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(exchange_mode(&mode));
    CUdeviceptr p = 0;
    CU(mem_alloc(&p, 4u << 20));
    CU(mem_free(p));  // guarded: unmapped now, during the capture
  }).join();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CU(is_capturing(stream, &status));
  CUgraph graph = nullptr;
  const CUresult ended = end_capture(stream, &graph);
  if (graph != nullptr) CU(graph_destroy(graph));
  CU(stream_destroy(stream));
  std::printf("capture client: ok; status after the unmap %d; end %d\n", static_cast<int>(status), static_cast<int>(ended));
  dlclose(libcuda);
  return 0;
}
