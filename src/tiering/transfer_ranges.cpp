#include "tiering/transfer_ranges.h"

namespace uvmpool::tiering {
namespace {

bool may_be_pool(CUmemorytype type) { return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED; }
bool may_be_host(CUmemorytype type) { return type == CU_MEMORYTYPE_HOST || type == CU_MEMORYTYPE_UNIFIED; }

// The span of one side: its first byte at (z * slice_height + y) * pitch + x from `base`, its last
// ((depth - 1) * slice_height + height - 1) * pitch + width - 1 past that. Nothing on overflow. A base
// of 0 is no reason to skip a side: its offsets alone may name pool memory.
void add_side(TransferRanges& out, CUmemorytype type, CUdeviceptr base, std::size_t x, std::size_t y, std::size_t z,
              std::size_t pitch, std::size_t slice_height, std::size_t width, std::size_t height, std::size_t depth) {
  if (!may_be_pool(type) || width == 0 || height == 0 || depth == 0) return;
  std::size_t first_row = 0, rows = 0, first = 0, span = 0, start = 0, end = 0;
  if (__builtin_mul_overflow(z, slice_height, &first_row) || __builtin_add_overflow(first_row, y, &first_row) ||
      __builtin_mul_overflow(first_row, pitch, &first) || __builtin_add_overflow(first, x, &first) ||
      __builtin_mul_overflow(depth - 1, slice_height, &rows) || __builtin_add_overflow(rows, height - 1, &rows) ||
      __builtin_mul_overflow(rows, pitch, &span) || __builtin_add_overflow(span, width, &span) ||
      __builtin_add_overflow(base, first, &start) || __builtin_add_overflow(start, span, &end))
    return;
  out.add(start, span);
}

}  // namespace

TransferRanges ranges_of(const CUDA_MEMCPY2D* c) {
  TransferRanges out;
  if (c == nullptr) return out;
  add_side(out, c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0, c->WidthInBytes,
           c->Height, 1);
  add_side(out, c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0, c->WidthInBytes,
           c->Height, 1);
  return out;
}

// CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER name their sides' fields alike.
template <typename Copy3D>
TransferRanges ranges_3d(const Copy3D* c) {
  TransferRanges out;
  if (c == nullptr) return out;
  add_side(out, c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, c->dstHeight,
           c->WidthInBytes, c->Height, c->Depth);
  add_side(out, c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight,
           c->WidthInBytes, c->Height, c->Depth);
  return out;
}
TransferRanges ranges_of(const CUDA_MEMCPY3D* c) { return ranges_3d(c); }
TransferRanges ranges_of(const CUDA_MEMCPY3D_PEER* c) { return ranges_3d(c); }

TransferRanges ranges_of(const CUDA_MEMCPY3D_BATCH_OP& op) {
  constexpr std::size_t kLargestArrayElement = 16;
  const bool with_array = op.src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY || op.dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
  const std::size_t element = with_array ? kLargestArrayElement : 1;
  TransferRanges out;
  std::size_t width = 0;
  if (__builtin_mul_overflow(op.extent.width, element, &width)) return out;
  for (const CUmemcpy3DOperand* side : {&op.dst, &op.src}) {
    if (side->type != CU_MEMCPY_OPERAND_TYPE_POINTER) continue;
    const std::size_t row = side->op.ptr.rowLength != 0 ? side->op.ptr.rowLength : op.extent.width;
    const std::size_t layer = side->op.ptr.layerHeight != 0 ? side->op.ptr.layerHeight : op.extent.height;
    std::size_t pitch = 0;
    if (__builtin_mul_overflow(row, element, &pitch)) continue;
    add_side(out, CU_MEMORYTYPE_UNIFIED, side->op.ptr.ptr, 0, 0, 0, pitch, layer, width, op.extent.height,
             op.extent.depth);
  }
  return out;
}

TransferRanges pitched_range(CUdeviceptr p, std::size_t pitch, std::size_t width, std::size_t element,
                             std::size_t height) {
  TransferRanges out;
  std::size_t width_bytes = 0;
  if (!__builtin_mul_overflow(width, element, &width_bytes))
    add_side(out, CU_MEMORYTYPE_DEVICE, p, 0, 0, 0, pitch, 0, width_bytes, height, 1);
  return out;
}

std::vector<TransferRange> mem_op_ranges(const CUstreamBatchMemOpParams* ops, unsigned count) {
  std::vector<TransferRange> out;
  if (ops == nullptr || count > driver::kMaxBatchMemOps) return out;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32: out.push_back({op.waitValue.address, 4}); break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: out.push_back({op.waitValue.address, 8}); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32: out.push_back({op.writeValue.address, 4}); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: out.push_back({op.writeValue.address, 8}); break;
      default: break;  // a barrier or a flush; an unknown one the driver refuses
    }
  }
  return out;
}

template <typename Copy>
bool host_side(const Copy* c) {
  return c != nullptr && (may_be_host(c->dstMemoryType) || may_be_host(c->srcMemoryType));
}
bool has_host_side(const CUDA_MEMCPY2D* c) { return host_side(c); }
bool has_host_side(const CUDA_MEMCPY3D* c) { return host_side(c); }
bool has_host_side(const CUDA_MEMCPY3D_PEER* c) { return host_side(c); }

}  // namespace uvmpool::tiering
