// Hooks of cuMemAdvise and cuMemPrefetchAsync, both forms, and cuMemPrefetchBatchAsync: uvmpool answers
// them for pool memory (src/tiering/advice.h says how), the driver for the rest (managed memory keeps
// its hints) and for what a graph capture forbids.
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"
#include "tiering/advice.h"

namespace uvmpool::hooks::impl {
namespace {

using driver::Fn;

const driver::Table* real_table() {
  const driver::RealDriver* d = driver::real();
  return d != nullptr ? &d->table : nullptr;
}

// Whether `stream` captures a graph (or did, and the capture was spoiled): a batch on it is the
// driver's to refuse, as a single prefetch is, before any of its ranges is looked at.
bool capturing(const driver::Table& d, CUstream stream, bool per_thread) {
  const auto is_capturing = per_thread ? d.cuStreamIsCapturing_ptsz : d.cuStreamIsCapturing;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}
constexpr bool kPerThread_cuMemPrefetchBatchAsync = false;
constexpr bool kPerThread_cuMemPrefetchBatchAsync_ptsz = true;

}  // namespace

// The driver is asked first. It takes managed memory; and before it looks at the memory it refuses
// what a capture forbids, spoiling the capture as it does so (measured on an H200,
// tests/fidelity/capture_test.cpp): a prefetch on a capturing stream in any mode, advice while the
// thread may make no unsafe call. Only memory it does not know (CUDA_ERROR_INVALID_VALUE) may be the
// pool's, which then answers. One driver call more for pool memory; these calls are rare.
#define UVMPOOL_ANSWER_OR_FORWARD(answer, symbol, ...)                                 \
  const driver::Table* d = real_table();                                               \
  if (d == nullptr || d->symbol == nullptr) return CUDA_ERROR_NO_DEVICE;               \
  const CUresult driver_says = d->symbol(__VA_ARGS__);                                 \
  if (driver_says != CUDA_ERROR_INVALID_VALUE) return driver_says;                     \
  const std::optional<CUresult> r = (answer);                                          \
  return r ? *r : driver_says

CUresult CUDAAPI cuMemAdvise(CUdeviceptr p, size_t bytes, CUmem_advise advice, CUdevice device) {
  stats::count_hook(Fn::cuMemAdvise);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::advise(p, bytes, advice, tiering::place_of(device)), cuMemAdvise, p, bytes,
                            advice, device);
}

CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr p, size_t bytes, CUmem_advise advice, CUmemLocation location) {
  stats::count_hook(Fn::cuMemAdvise_v2);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::advise(p, bytes, advice, tiering::place_of(location)), cuMemAdvise_v2, p, bytes,
                            advice, location);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t bytes, CUdevice device, CUstream stream) {
  stats::count_hook(Fn::cuMemPrefetchAsync);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::prefetch(p, bytes, tiering::place_of(device), 0), cuMemPrefetchAsync, p, bytes,
                            device, stream);
}

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t bytes, CUdevice device, CUstream stream) {
  stats::count_hook(Fn::cuMemPrefetchAsync_ptsz);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::prefetch(p, bytes, tiering::place_of(device), 0), cuMemPrefetchAsync_ptsz, p,
                            bytes, device, stream);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t bytes, CUmemLocation location, unsigned flags,
                                       CUstream stream) {
  stats::count_hook(Fn::cuMemPrefetchAsync_v2);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::prefetch(p, bytes, tiering::place_of(location), flags), cuMemPrefetchAsync_v2, p,
                            bytes, location, flags, stream);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t bytes, CUmemLocation location, unsigned flags,
                                            CUstream stream) {
  stats::count_hook(Fn::cuMemPrefetchAsync_v2_ptsz);
  UVMPOOL_ANSWER_OR_FORWARD(tiering::prefetch(p, bytes, tiering::place_of(location), flags),
                            cuMemPrefetchAsync_v2_ptsz, p, bytes, location, flags, stream);
}

#undef UVMPOOL_ANSWER_OR_FORWARD

// cuMemPrefetchBatchAsync: the pool's ranges answered here, the rest forwarded as a batch of their own
// on the same stream (tiering::prefetch_batch); a batch with none of the pool's, or malformed, goes to
// the driver as made.
#define UVMPOOL_PREFETCH_BATCH(symbol)                                                                     \
  CUresult CUDAAPI symbol(CUdeviceptr* ptrs, size_t* sizes, size_t count, CUmemLocation* locations,         \
                          size_t* first, size_t loc_count, unsigned long long flags, CUstream stream) {     \
    stats::count_hook(Fn::symbol);                                                                        \
    const driver::Table* d = real_table();                                                                \
    if (d == nullptr || d->symbol == nullptr) return CUDA_ERROR_NO_DEVICE;                                \
    if (capturing(*d, stream, kPerThread_##symbol)) /* the driver refuses it and spoils the capture */    \
      return d->symbol(ptrs, sizes, count, locations, first, loc_count, flags, stream);                   \
    const std::optional<CUresult> r = tiering::prefetch_batch(                                            \
        ptrs, sizes, count, locations, first, loc_count, flags,                                           \
        [&](std::vector<CUdeviceptr>& p, std::vector<size_t>& n, std::vector<CUmemLocation>& l,          \
            std::vector<size_t>& f) {                                                                     \
          return d->symbol(p.data(), n.data(), p.size(), l.data(), f.data(), l.size(), flags, stream);     \
        });                                                                                               \
    return r ? *r : d->symbol(ptrs, sizes, count, locations, first, loc_count, flags, stream);            \
  }
UVMPOOL_PREFETCH_BATCH(cuMemPrefetchBatchAsync)
UVMPOOL_PREFETCH_BATCH(cuMemPrefetchBatchAsync_ptsz)
#undef UVMPOOL_PREFETCH_BATCH

}  // namespace uvmpool::hooks::impl
