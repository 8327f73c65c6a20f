// What a strided or peer copy, or a pitched memset, touches, as tiering's transfer ranges
// (Tiering::before_transfer): for each side that may be pool memory, the span from its first byte to
// its last. A strided side touches only its rows, but the span is what a mapping-granular touch needs
// (a row gap inside one mapping changes nothing), and it is cheap to find. Sides of host or array
// type are never pool memory and give no range; a unified side may be, and is looked up.
//
// Used by the transfer hooks (src/hooks/transfer_hooks.cpp) before they forward the call, so every
// figure comes from arguments the driver has not checked yet: a null descriptor, an extent that
// overflows, or a type the driver would refuse gives no range, never a fault (the driver then answers
// the program with its own error).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "driver/batch_mem_ops.h"
#include "driver/driver_api.h"
#include "tiering/tiering.h"

namespace uvmpool::tiering {

// Up to two ranges (a copy's destination and source), in that order.
class TransferRanges {
 public:
  void add(CUdeviceptr address, std::size_t bytes) {
    if (address != 0 && bytes != 0) ranges_[count_++] = {address, bytes};
  }
  std::span<const TransferRange> span() const { return {ranges_.data(), count_}; }

 private:
  std::array<TransferRange, 2> ranges_{};
  std::size_t count_ = 0;
};

// `count` elements of `element` bytes (a memset's), or the most a size holds when that overflows: a
// range too wide only plans more, one wrapped to a few bytes would miss memory the call writes.
inline std::size_t bytes_of(std::size_t count, std::size_t element) {
  std::size_t bytes = 0;
  return __builtin_mul_overflow(count, element, &bytes) ? SIZE_MAX : bytes;
}

TransferRanges ranges_of(const CUDA_MEMCPY2D* copy);
TransferRanges ranges_of(const CUDA_MEMCPY3D* copy);
TransferRanges ranges_of(const CUDA_MEMCPY3D_PEER* copy);

// One copy of a 3D batch (cuMemcpy3DBatchAsync): each pointer operand's span, its rows `rowLength`
// elements apart (the width when 0) and its layers `layerHeight` rows (the height when 0), from its
// pointer. Between two pointers an element is a byte; against a CUDA array it is the array's, which
// the call does not say (at most 16 bytes: four 32-bit channels), so that span is taken 16 times as
// wide: a touch too wide only plans more, one too narrow would miss memory the copy reads or writes.
TransferRanges ranges_of(const CUDA_MEMCPY3D_BATCH_OP& op);

// A pitched memset: `height` rows of `width` elements of `element` bytes, `pitch` bytes apart from `p`.
TransferRanges pitched_range(CUdeviceptr p, std::size_t pitch, std::size_t width, std::size_t element,
                             std::size_t height);
// The words a batch of stream memory operations waits on or writes (cuStreamBatchMemOp, a graph's
// memory-operation node): 4 or 8 bytes at each wait's and write's address, in order; barriers and
// flushes name none. A null array gives none, and so does a batch of more than
// driver::kMaxBatchMemOps, which the driver refuses whole without running any: its array is not read
// past what the driver would read.
std::vector<TransferRange> mem_op_ranges(const CUstreamBatchMemOpParams* ops, unsigned count);

// A flat copy's or memset's ranges, as given.
inline TransferRanges flat_ranges(TransferRange first, TransferRange second = {0, 0}) {
  TransferRanges out;
  out.add(first.address, first.bytes);
  out.add(second.address, second.bytes);
  return out;
}

// Whether a side of the copy is (or, unified, may be) host memory: the real driver then may wait for
// the device before it returns, even for an asynchronous copy (pageable memory), so the hook passes
// the host-wait gate. A null descriptor: false (the driver refuses it at once).
bool has_host_side(const CUDA_MEMCPY2D* copy);
bool has_host_side(const CUDA_MEMCPY3D* copy);
bool has_host_side(const CUDA_MEMCPY3D_PEER* copy);

}  // namespace uvmpool::tiering
