// Hooks of the kernel launches and of the unloads: each launch is shown to tiering (src/tiering)
// before the driver gets it, unchanged. Every launch route is here, since programs use all of them:
// the CUDA runtime resolves cuLaunchKernel (and its per-thread variant) through cuGetProcAddress,
// cuBLAS and CUTLASS sm90 GEMMs launch through cuLaunchKernelEx, cooperative kernels through
// cuLaunchCooperativeKernel.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
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
    case Fn::cuLibraryUnload: return true;
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

void show(CUfunction f, CUstream stream, void** params, void** extra) {
  if (tiering::Tiering* t = tiering::Tiering::process()) t->before_launch(f, stream, params, extra);
}

CUstream config_stream(const CUlaunchConfig* config) { return config != nullptr ? config->hStream : nullptr; }

// After an unload the driver may reuse its function handles: tiering forgets every parameter layout.
CUresult forget_layouts_if(CUresult unloaded) {
  if (unloaded == CUDA_SUCCESS)
    if (tiering::Tiering* t = tiering::Tiering::existing()) t->unloaded();
  return unloaded;
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
  show(f, s, params, extra);
  UVMPOOL_FORWARD(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernel_ptsz);
  show(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, extra);
  UVMPOOL_FORWARD(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernelEx);
  show(f, config_stream(config), params, extra);
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UVMPOOL_FORWARD(cuLaunchKernelEx, config, f, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  stats::count_hook(Fn::cuLaunchKernelEx_ptsz);
  const CUstream s = config_stream(config);
  show(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, extra);
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UVMPOOL_FORWARD(cuLaunchKernelEx_ptsz, config, f, params, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shared, CUstream s, void** params) {
  stats::count_hook(Fn::cuLaunchCooperativeKernel);
  show(f, s, params, nullptr);
  UVMPOOL_FORWARD(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                                void** params) {
  stats::count_hook(Fn::cuLaunchCooperativeKernel_ptsz);
  show(f, s == nullptr ? CU_STREAM_PER_THREAD : s, params, nullptr);
  UVMPOOL_FORWARD(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  stats::count_hook(Fn::cuModuleUnload);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuModuleUnload == nullptr) return CUDA_ERROR_NO_DEVICE;
  return forget_layouts_if(d->cuModuleUnload(module));
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  stats::count_hook(Fn::cuLibraryUnload);
  const driver::Table* d = real_table();
  if (d == nullptr || d->cuLibraryUnload == nullptr) return CUDA_ERROR_NO_DEVICE;
  return forget_layouts_if(d->cuLibraryUnload(library));
}

#undef UVMPOOL_FORWARD

}  // namespace impl
}  // namespace uvmpool::hooks
