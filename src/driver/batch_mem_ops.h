// The most operations one batch of stream memory operations holds (cuStreamBatchMemOp, a graph's
// memory-operation node): cuda.h says "must be less than 256", and the H200's driver (580.159.04)
// ran 255 and refused 256 and more whole with CUDA_ERROR_INVALID_VALUE, running none
// (docs/gpu-results.md, 2026-12-04). The simulator refuses alike (src/sim/launch.cpp), and tiering reads
// no more of a batch's array than the driver would (src/tiering/transfer_ranges.h).
#pragma once

namespace uvmpool::driver {

inline constexpr unsigned kMaxBatchMemOps = 255;

}  // namespace uvmpool::driver
