// Advice and prefetches (cuMemAdvise, cuMemPrefetchAsync, cuMemPrefetchBatchAsync). The simulated
// driver has no managed memory (cuMemAllocManaged is not in the list), so it refuses them for every
// range, as the real driver refuses them for memory that cuMemAllocManaged did not make:
// CUDA_ERROR_INVALID_VALUE. uvmpool answers them itself for pool memory (src/tiering/advice.h) and
// hands only other memory down here. Before that, what captures forbid (measured on an H200, driver
// 580, for managed, cuMemAlloc and VMM memory alike): a prefetch on a capturing stream, in any mode
// and with any arguments, and advice where the thread may make no unsafe call (timeline.h) answer
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and spoil the capture.
#include "sim/entry_points.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {
constexpr bool kLegacy = false, kPerThread = true;

CUresult advise() {
  if (const CUresult r = timeline::unsafe_call(); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult prefetch(CUstream stream, bool per_thread) {
  if (const CUresult r = timeline::not_capturing(stream, per_thread); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_INVALID_VALUE;
}
}  // namespace

CUresult impl::cuMemAdvise(CUdeviceptr_v2, size_t, CUmem_advise, CUdevice_v1) { return advise(); }
CUresult impl::cuMemAdvise_v2(CUdeviceptr_v2, size_t, CUmem_advise, CUmemLocation_v1) { return advise(); }
CUresult impl::cuMemPrefetchAsync(CUdeviceptr_v2, size_t, CUdevice_v1, CUstream s) { return prefetch(s, kLegacy); }
CUresult impl::cuMemPrefetchAsync_ptsz(CUdeviceptr_v2, size_t, CUdevice_v1, CUstream s) {
  return prefetch(s, kPerThread);
}
CUresult impl::cuMemPrefetchAsync_v2(CUdeviceptr_v2, size_t, CUmemLocation_v1, unsigned int, CUstream s) {
  return prefetch(s, kLegacy);
}
CUresult impl::cuMemPrefetchAsync_v2_ptsz(CUdeviceptr_v2, size_t, CUmemLocation_v1, unsigned int, CUstream s) {
  return prefetch(s, kPerThread);
}
CUresult impl::cuMemPrefetchBatchAsync(CUdeviceptr_v2*, size_t*, size_t, CUmemLocation_v1*, size_t*, size_t,
                                       unsigned long long, CUstream s) {
  return prefetch(s, kLegacy);
}
CUresult impl::cuMemPrefetchBatchAsync_ptsz(CUdeviceptr_v2*, size_t*, size_t, CUmemLocation_v1*, size_t*, size_t,
                                            unsigned long long, CUstream s) {
  return prefetch(s, kPerThread);
}

}  // namespace uvmpool::sim
