// Advice and prefetches (cuMemAdvise, cuMemPrefetchAsync, cuMemPrefetchBatchAsync). The simulated
// driver has no managed memory (cuMemAllocManaged is not in the list), so it refuses them for every
// range, as the real driver refuses them for memory that cuMemAllocManaged did not make:
// CUDA_ERROR_INVALID_VALUE. uvmpool answers them itself for pool memory (src/tiering/advice.h) and
// hands only other memory down here.
#include "sim/entry_points.h"

namespace uvmpool::sim {

CUresult impl::cuMemAdvise(CUdeviceptr_v2, size_t, CUmem_advise, CUdevice_v1) { return CUDA_ERROR_INVALID_VALUE; }
CUresult impl::cuMemAdvise_v2(CUdeviceptr_v2, size_t, CUmem_advise, CUmemLocation_v1) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult impl::cuMemPrefetchAsync(CUdeviceptr_v2, size_t, CUdevice_v1, CUstream) { return CUDA_ERROR_INVALID_VALUE; }
CUresult impl::cuMemPrefetchAsync_ptsz(CUdeviceptr_v2, size_t, CUdevice_v1, CUstream) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult impl::cuMemPrefetchAsync_v2(CUdeviceptr_v2, size_t, CUmemLocation_v1, unsigned int, CUstream) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult impl::cuMemPrefetchAsync_v2_ptsz(CUdeviceptr_v2, size_t, CUmemLocation_v1, unsigned int, CUstream) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult impl::cuMemPrefetchBatchAsync(CUdeviceptr_v2*, size_t*, size_t, CUmemLocation_v1*, size_t*, size_t,
                                       unsigned long long, CUstream) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult impl::cuMemPrefetchBatchAsync_ptsz(CUdeviceptr_v2*, size_t*, size_t, CUmemLocation_v1*, size_t*, size_t,
                                            unsigned long long, CUstream) {
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace uvmpool::sim
