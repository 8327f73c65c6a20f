// Hooks of the kernel launches, the unloads and stream creation: each launch is shown to tiering
// (src/tiering) before and after the driver gets it, unchanged; each new stream is listed for the
// mover's holds (tiering/streams.h). Every launch route is here, since programs use all of them:
// the CUDA runtime resolves cuLaunchKernel (and its per-thread variant) through cuGetProcAddress,
// cuBLAS and CUTLASS sm90 GEMMs launch through cuLaunchKernelEx, cooperative kernels through
// cuLaunchCooperativeKernel.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "hooks/shown.h"
#include "pool/pool.h"
#include "stats/counters.h"
#include "tiering/tiering.h"

namespace uvmpool::hooks {

bool watches_launches() {
  static const bool watching = tiering::configured_mode() != tiering::Mode::Off;
  return watching;
}

bool is_launch_hook(driver::Fn fn) {
  using driver::Fn;
  switch (fn) {
    case Fn::cuLaunchKernel:
    case Fn::cuLaunchKernel_ptsz:
    case Fn::cuLaunchKernelEx:
    case Fn::cuLaunchKernelEx_ptsz:
    case Fn::cuLaunchCooperativeKernel:
    case Fn::cuLaunchCooperativeKernel_ptsz:
    case Fn::cuModuleUnload:
    case Fn::cuLibraryUnload:
    // (A context's destruction, cuCtxDestroy and the primary context's release and reset, is the
    // pool's too, Pool::context_destroying: handed out always.)
    case Fn::cuStreamCreate:
    case Fn::cuStreamCreateWithPriority:
    case Fn::cuCtxCreate_v2:
    case Fn::cuCtxCreate_v3:
    case Fn::cuCtxCreate_v4:
    case Fn::cuDevicePrimaryCtxRetain:
    // The calls that may wait inside the driver (host_wait_hooks.cpp, transfer_hooks.cpp).
    case Fn::cuMemAllocHost_v2:
    case Fn::cuMemHostAlloc:
    case Fn::cuMemFreeHost:
    case Fn::cuModuleLoadData:
    case Fn::cuModuleLoadDataEx:
    case Fn::cuModuleGetFunction:
    case Fn::cuLibraryLoadData:
    case Fn::cuLibraryGetKernel:
    case Fn::cuKernelGetFunction:
    case Fn::cuFuncGetAttribute:
    case Fn::cuFuncSetAttribute:
    case Fn::cuFuncSetCacheConfig:
    case Fn::cuFuncLoad:
    case Fn::cuKernelGetAttribute:
    case Fn::cuKernelSetAttribute:
    case Fn::cuOccupancyMaxActiveBlocksPerMultiprocessor:
    case Fn::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags:
    case Fn::cuMemcpy:
    case Fn::cuMemcpy_ptds:
    case Fn::cuMemcpyHtoD_v2:
    case Fn::cuMemcpyHtoD_v2_ptds:
    case Fn::cuMemcpyDtoH_v2:
    case Fn::cuMemcpyDtoH_v2_ptds:
    case Fn::cuMemcpyDtoD_v2:
    case Fn::cuMemcpyDtoD_v2_ptds:
    case Fn::cuMemcpyDtoA_v2:
    case Fn::cuMemcpyDtoA_v2_ptds:
    case Fn::cuMemcpyAtoD_v2:
    case Fn::cuMemcpyAtoD_v2_ptds:
    case Fn::cuMemcpyAsync:
    case Fn::cuMemcpyAsync_ptsz:
    case Fn::cuMemcpyHtoDAsync_v2:
    case Fn::cuMemcpyHtoDAsync_v2_ptsz:
    case Fn::cuMemcpyDtoHAsync_v2:
    case Fn::cuMemcpyDtoHAsync_v2_ptsz:
    // The copies and memsets shown to tiering (transfer_hooks.cpp).
    case Fn::cuMemcpyDtoDAsync_v2:
    case Fn::cuMemcpyDtoDAsync_v2_ptsz:
    case Fn::cuMemsetD8_v2:
    case Fn::cuMemsetD8_v2_ptds:
    case Fn::cuMemsetD16_v2:
    case Fn::cuMemsetD16_v2_ptds:
    case Fn::cuMemsetD32_v2:
    case Fn::cuMemsetD32_v2_ptds:
    case Fn::cuMemsetD8Async:
    case Fn::cuMemsetD8Async_ptsz:
    case Fn::cuMemsetD16Async:
    case Fn::cuMemsetD16Async_ptsz:
    case Fn::cuMemsetD32Async:
    case Fn::cuMemsetD32Async_ptsz:
    case Fn::cuMemsetD2D8_v2:
    case Fn::cuMemsetD2D8_v2_ptds:
    case Fn::cuMemsetD2D16_v2:
    case Fn::cuMemsetD2D16_v2_ptds:
    case Fn::cuMemsetD2D32_v2:
    case Fn::cuMemsetD2D32_v2_ptds:
    case Fn::cuMemsetD2D8Async:
    case Fn::cuMemsetD2D8Async_ptsz:
    case Fn::cuMemsetD2D16Async:
    case Fn::cuMemsetD2D16Async_ptsz:
    case Fn::cuMemsetD2D32Async:
    case Fn::cuMemsetD2D32Async_ptsz:
    case Fn::cuMemcpy2D_v2:
    case Fn::cuMemcpy2D_v2_ptds:
    case Fn::cuMemcpy2DUnaligned_v2:
    case Fn::cuMemcpy2DUnaligned_v2_ptds:
    case Fn::cuMemcpy2DAsync_v2:
    case Fn::cuMemcpy2DAsync_v2_ptsz:
    case Fn::cuMemcpy3D_v2:
    case Fn::cuMemcpy3D_v2_ptds:
    case Fn::cuMemcpy3DAsync_v2:
    case Fn::cuMemcpy3DAsync_v2_ptsz:
    case Fn::cuMemcpyPeer:
    case Fn::cuMemcpyPeer_ptds:
    case Fn::cuMemcpyPeerAsync:
    case Fn::cuMemcpyPeerAsync_ptsz:
    case Fn::cuMemcpy3DPeer:
    case Fn::cuMemcpy3DPeer_ptds:
    case Fn::cuMemcpy3DPeerAsync:
    case Fn::cuMemcpy3DPeerAsync_ptsz:
    case Fn::cuMemcpyBatchAsync:
    case Fn::cuMemcpyBatchAsync_ptsz:
    case Fn::cuMemcpyBatchAsync_v2:
    case Fn::cuMemcpyBatchAsync_v2_ptsz:
    case Fn::cuMemcpy3DBatchAsync:
    case Fn::cuMemcpy3DBatchAsync_ptsz:
    case Fn::cuMemcpy3DBatchAsync_v2:
    case Fn::cuMemcpy3DBatchAsync_v2_ptsz:
    // The stream memory operations (mem_op_hooks.cpp).
    case Fn::cuStreamWaitValue32_v2:
    case Fn::cuStreamWaitValue32_v2_ptsz:
    case Fn::cuStreamWaitValue64_v2:
    case Fn::cuStreamWaitValue64_v2_ptsz:
    case Fn::cuStreamWriteValue32_v2:
    case Fn::cuStreamWriteValue32_v2_ptsz:
    case Fn::cuStreamWriteValue64_v2:
    case Fn::cuStreamWriteValue64_v2_ptsz:
    case Fn::cuStreamBatchMemOp_v2:
    case Fn::cuStreamBatchMemOp_v2_ptsz:
    // Graphs (graph_hooks.cpp; a capture's begin and end are the pool's too: handed out always).
    case Fn::cuGraphDestroy:
    case Fn::cuGraphClone:
    case Fn::cuGraphAddChildGraphNode:
    case Fn::cuGraphInstantiate_v2:
    case Fn::cuGraphInstantiateWithFlags:
    case Fn::cuGraphInstantiateWithParams:
    case Fn::cuGraphInstantiateWithParams_ptsz:
    // Nodes built and changed by hand (graph_node_hooks.cpp).
    case Fn::cuGraphAddKernelNode:
    case Fn::cuGraphAddKernelNode_v2:
    case Fn::cuGraphKernelNodeSetParams:
    case Fn::cuGraphKernelNodeSetParams_v2:
    case Fn::cuGraphExecKernelNodeSetParams:
    case Fn::cuGraphExecKernelNodeSetParams_v2:
    case Fn::cuGraphAddMemcpyNode:
    case Fn::cuGraphMemcpyNodeSetParams:
    case Fn::cuGraphExecMemcpyNodeSetParams:
    case Fn::cuGraphAddMemsetNode:
    case Fn::cuGraphMemsetNodeSetParams:
    case Fn::cuGraphExecMemsetNodeSetParams:
    case Fn::cuGraphAddBatchMemOpNode:
    case Fn::cuGraphBatchMemOpNodeSetParams:
    case Fn::cuGraphExecBatchMemOpNodeSetParams:
    case Fn::cuGraphAddNode:
    case Fn::cuGraphAddNode_v2:
    case Fn::cuGraphNodeSetParams:
    case Fn::cuGraphExecNodeSetParams:
    case Fn::cuGraphExecUpdate_v2:
    case Fn::cuGraphExecDestroy:
    case Fn::cuGraphLaunch:
    case Fn::cuGraphLaunch_ptsz: return true;
    default: return false;
  }
}

namespace impl {
namespace {

using driver::Fn;

const driver::Table* real_table() {
  const driver::RealDriver* d = driver::real();
  return d != nullptr ? &d->table : nullptr;
}

CUstream config_stream(const CUlaunchConfig* config) { return config != nullptr ? config->hStream : nullptr; }

// After an unload the driver may reuse its function handles: tiering forgets every parameter layout.
// So after a context goes (destroyed, or a primary context released or reset, as cudaDeviceReset
// does), which unloads its modules with it: a layout kept for a handle the driver hands out again
// would read another kernel's parameters past their end.
CUresult forget_layouts_if(CUresult unloaded) {
  if (unloaded == CUDA_SUCCESS)
    if (tiering::Tiering* t = tiering::Tiering::existing()) t->unloaded();
  return unloaded;
}

// Before a context may be destroyed: the pool waits for what was freed on it and drops its events
// (Pool::context_destroying), while the context still exists to wait on.
void context_going(CUcontext context) {
  if (context == nullptr) return;
  if (pool::Pool* p = pool::Pool::existing()) p->context_destroying(context);
}

// The primary context of `device` while it is active, without a reference more or less afterwards;
// null when inactive (a retain would make it).
CUcontext active_primary(const driver::Table& d, CUdevice device) {
  unsigned flags = 0;
  int active = 0;
  if (d.cuDevicePrimaryCtxGetState == nullptr || d.cuDevicePrimaryCtxRetain == nullptr ||
      d.cuDevicePrimaryCtxGetState(device, &flags, &active) != CUDA_SUCCESS || active == 0)
    return nullptr;
  CUcontext context = nullptr;
  if (d.cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) return nullptr;
  d.cuDevicePrimaryCtxRelease_v2(device);
  return context;
}

}  // namespace

// As the exported hooks answer without a driver. A null function (or launch configuration) is answered
// here, as the driver documents it, rather than handed on: the H200's driver (580) crashed on a launch
// of a null function whose other arguments were garbage.
#define UVMPOOL_FORWARD(symbol, ...)                                   \
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;                  \
  const driver::Table* d = real_table();                               \
  if (d == nullptr || d->symbol == nullptr) return CUDA_ERROR_NO_DEVICE; \
  return d->symbol(__VA_ARGS__)

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernel);
  const Shown shown(f, s, params, extra);
  UVMPOOL_FORWARD(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernel_ptsz);
  const Shown shown(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, extra);
  UVMPOOL_FORWARD(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernelEx);
  const Shown shown(f, config_stream(config), params, extra);
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UVMPOOL_FORWARD(cuLaunchKernelEx, config, f, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernelEx_ptsz);
  const CUstream s = config_stream(config);
  const Shown shown(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, extra);
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UVMPOOL_FORWARD(cuLaunchKernelEx_ptsz, config, f, params, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shared, CUstream s, void** params) {
  stats::count_hook(Fn::cuLaunchCooperativeKernel);
  const Shown shown(f, s, params, nullptr);
  UVMPOOL_FORWARD(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                                void** params) {
  stats::count_hook(Fn::cuLaunchCooperativeKernel_ptsz);
  const Shown shown(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, nullptr);
  UVMPOOL_FORWARD(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  stats::count_hook(Fn::cuModuleUnload);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuModuleUnload == nullptr) return CUDA_ERROR_NO_DEVICE;
  return forget_layouts_if(d->cuModuleUnload(module));
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext context) {
  stats::count_hook(Fn::cuCtxDestroy_v2);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuCtxDestroy_v2 == nullptr) return CUDA_ERROR_NO_DEVICE;
  context_going(context);
  return forget_layouts_if(d->cuCtxDestroy_v2(context));
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  stats::count_hook(Fn::cuDevicePrimaryCtxRelease_v2);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuDevicePrimaryCtxRelease_v2 == nullptr) return CUDA_ERROR_NO_DEVICE;
  // Whether this release is the last one cannot be asked: the pool lets go of the context either way
  // (a wait only if memory freed on it is pending; it makes new events when used again).
  context_going(active_primary(*d, device));
  const CUresult released = d->cuDevicePrimaryCtxRelease_v2(device);
  // Only the last release destroys the context (and unloads its modules); the others keep every layout.
  unsigned flags = 0;
  int active = 0;
  if (released == CUDA_SUCCESS && d->cuDevicePrimaryCtxGetState != nullptr &&
      d->cuDevicePrimaryCtxGetState(device, &flags, &active) == CUDA_SUCCESS && active != 0)
    return released;
  return forget_layouts_if(released);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice device) {
  stats::count_hook(Fn::cuDevicePrimaryCtxReset_v2);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuDevicePrimaryCtxReset_v2 == nullptr) return CUDA_ERROR_NO_DEVICE;
  context_going(active_primary(*d, device));
  return forget_layouts_if(d->cuDevicePrimaryCtxReset_v2(device));
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  stats::count_hook(Fn::cuLibraryUnload);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuLibraryUnload == nullptr) return CUDA_ERROR_NO_DEVICE;
  return forget_layouts_if(d->cuLibraryUnload(library));
}

namespace {
// A stream made while the mover holds the program's streams waits for the hold's end too.
CUresult listed(const driver::Table& d, CUresult made, CUstream stream, unsigned flags) {
  if (made != CUDA_SUCCESS) return made;
  CUcontext context = nullptr;
  if (d.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) return made;
  const tiering::StreamRegistry::Hold hold =
      tiering::StreamRegistry::process().created(stream, context, (flags & CU_STREAM_NON_BLOCKING) != 0);
  if (hold.flag != 0 && d.cuStreamWaitValue32_v2 != nullptr)
    d.cuStreamWaitValue32_v2(stream, hold.flag, hold.value, CU_STREAM_WAIT_VALUE_GEQ);
  return made;
}

// A context made (or a primary one retained) is listed, and held if a hold stands (streams.h).
CUresult context_listed(const driver::Table& d, CUresult made, const CUcontext* context) {
  if (made == CUDA_SUCCESS && context != nullptr) tiering::StreamRegistry::process().context_made(d, *context);
  return made;
}
}  // namespace

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  stats::count_hook(Fn::cuCtxCreate_v2);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuCtxCreate_v2 == nullptr) return CUDA_ERROR_NO_DEVICE;
  return context_listed(*d, d->cuCtxCreate_v2(pctx, flags, dev), pctx);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int count, unsigned int flags,
                                CUdevice dev) {
  stats::count_hook(Fn::cuCtxCreate_v3);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuCtxCreate_v3 == nullptr) return CUDA_ERROR_NO_DEVICE;
  return context_listed(*d, d->cuCtxCreate_v3(pctx, params, count, flags, dev), pctx);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  stats::count_hook(Fn::cuCtxCreate_v4);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuCtxCreate_v4 == nullptr) return CUDA_ERROR_NO_DEVICE;
  return context_listed(*d, d->cuCtxCreate_v4(pctx, params, flags, dev), pctx);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  stats::count_hook(Fn::cuDevicePrimaryCtxRetain);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuDevicePrimaryCtxRetain == nullptr) return CUDA_ERROR_NO_DEVICE;
  return context_listed(*d, d->cuDevicePrimaryCtxRetain(pctx, dev), pctx);
}

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  stats::count_hook(Fn::cuStreamCreate);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuStreamCreate == nullptr) return CUDA_ERROR_NO_DEVICE;
  const CUresult r = d->cuStreamCreate(stream, flags);
  return r == CUDA_SUCCESS ? listed(*d, r, *stream, flags) : r;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  stats::count_hook(Fn::cuStreamCreateWithPriority);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuStreamCreateWithPriority == nullptr) return CUDA_ERROR_NO_DEVICE;
  const CUresult r = d->cuStreamCreateWithPriority(stream, flags, priority);
  return r == CUDA_SUCCESS ? listed(*d, r, *stream, flags) : r;
}

#undef UVMPOOL_FORWARD

}  // namespace impl
}  // namespace uvmpool::hooks
