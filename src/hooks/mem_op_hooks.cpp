// Hooks of the stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 and
// cuStreamBatchMemOp, each in its legacy and per-thread forms. A wait reads a word and a write writes
// one, possibly in pool memory (a flag or a counter the program keeps there), so each is shown to
// tiering as a transfer touching those words (Tiering::before_transfer): it passes the submission
// gates as a memset does, so it cannot land between a hold's event and its wait, nor be called while a
// commit has its word unmapped (the driver refuses an unmapped address when called, as it does a
// memset's: measured on the H200, MemOps.AWordNotMappedIsRefusedWhenCalled); an overlapped move of its
// memory orders it behind the commit; a capture records the words into its graph. None of these waits
// on the host when called, so none passes the host-wait gate. A wait that never ends (its value never
// written) holds its stream as it would without uvmpool; a move of memory it touched waits behind it,
// which the mover's hold patience bounds (mover.h).
#include <vector>

#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "hooks/shown.h"
#include "stats/counters.h"
#include "tiering/transfer_ranges.h"

namespace uvmpool::hooks::impl {
namespace {

// A per-thread variant's stream 0 is the calling thread's default stream.
CUstream per_thread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

}  // namespace

// Counts the call, shows tiering the `bytes` at `address` it reaches on `stream`, and forwards it.
#define UVMPOOL_MEM_OP(symbol, value_type, bytes, stream)                                          \
  CUresult CUDAAPI symbol(CUstream s, CUdeviceptr address, value_type value, unsigned int flags) { \
    stats::count_hook(driver::Fn::symbol);                                                        \
    const driver::RealDriver* d = driver::real();                                                \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE;                  \
    const tiering::TransferRanges touched = tiering::flat_ranges({address, bytes});               \
    const Shown shown(tiering::Transfer::MemOp, stream, touched.span());                          \
    return d->table.symbol(s, address, value, flags);                                             \
  }
UVMPOOL_MEM_OP(cuStreamWaitValue32_v2, cuuint32_t, 4, s)
UVMPOOL_MEM_OP(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 4, per_thread(s))
UVMPOOL_MEM_OP(cuStreamWaitValue64_v2, cuuint64_t, 8, s)
UVMPOOL_MEM_OP(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 8, per_thread(s))
UVMPOOL_MEM_OP(cuStreamWriteValue32_v2, cuuint32_t, 4, s)
UVMPOOL_MEM_OP(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 4, per_thread(s))
UVMPOOL_MEM_OP(cuStreamWriteValue64_v2, cuuint64_t, 8, s)
UVMPOOL_MEM_OP(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 8, per_thread(s))
#undef UVMPOOL_MEM_OP

// A batch: the words of each of its waits and writes (tiering/transfer_ranges.h). A null array with a
// count is refused here: driver 580.159.04 crashes on it inside cuStreamBatchMemOp_v2 (measured on the
// H200, 2026-12-04), where the simulator answers INVALID_VALUE.
#define UVMPOOL_BATCH_MEM_OP(symbol, stream)                                                              \
  CUresult CUDAAPI symbol(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int flags) { \
    stats::count_hook(driver::Fn::symbol);                                                               \
    const driver::RealDriver* d = driver::real();                                                       \
    if (d == nullptr || d->table.symbol == nullptr) return CUDA_ERROR_NO_DEVICE;                         \
    if (ops == nullptr && count != 0) return CUDA_ERROR_INVALID_VALUE;                                   \
    const std::vector<tiering::TransferRange> touched = tiering::mem_op_ranges(ops, count);             \
    const Shown shown(tiering::Transfer::MemOp, stream, touched);                                        \
    return d->table.symbol(s, count, ops, flags);                                                        \
  }
UVMPOOL_BATCH_MEM_OP(cuStreamBatchMemOp_v2, s)
UVMPOOL_BATCH_MEM_OP(cuStreamBatchMemOp_v2_ptsz, per_thread(s))
#undef UVMPOOL_BATCH_MEM_OP

}  // namespace uvmpool::hooks::impl
