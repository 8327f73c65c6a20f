// What the transfer hooks show tiering for strided, peer and pitched transfers
// (src/tiering/transfer_ranges.h): the span of each side that may be pool memory, first byte to
// last; nothing for host or array sides, for a null descriptor or for an extent that overflows.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tiering/transfer_ranges.h"

namespace {

using uvmpool::tiering::TransferRange;
using uvmpool::tiering::TransferRanges;

std::vector<std::pair<CUdeviceptr, std::size_t>> list(const TransferRanges& r) {
  std::vector<std::pair<CUdeviceptr, std::size_t>> out;
  for (const TransferRange& x : r.span()) out.emplace_back(x.address, x.bytes);
  return out;
}
using Ranges = std::vector<std::pair<CUdeviceptr, std::size_t>>;

TEST(TransferRanges, A2DCopySpansEachSideFromItsFirstByteToItsLast) {
  CUDA_MEMCPY2D c{};
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x100000;
  c.dstXInBytes = 8;
  c.dstY = 2;
  c.dstPitch = 256;
  c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;  // may be pool memory: looked up
  c.srcDevice = 0x200000;
  c.srcPitch = 64;
  c.WidthInBytes = 32;
  c.Height = 4;
  // dst: from 2 * 256 + 8, three pitches and a row on; src: from 0, three pitches of 64 and a row.
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&c)), (Ranges{{0x100000 + 520, 3 * 256 + 32}, {0x200000, 3 * 64 + 32}}));
  EXPECT_TRUE(uvmpool::tiering::has_host_side(&c)) << "a unified side may be host memory";
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&c)), (Ranges{{0x100000 + 520, 3 * 256 + 32}}))
      << "host memory is never the pool's";
  EXPECT_TRUE(uvmpool::tiering::has_host_side(&c));
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_FALSE(uvmpool::tiering::has_host_side(&c));
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&c)).size(), 1u);
}

TEST(TransferRanges, A3DCopyCountsSlicesOfItsOwnHeight) {
  CUDA_MEMCPY3D c{};
  c.dstMemoryType = c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x100000;
  c.dstPitch = 128;
  c.dstHeight = 8;
  c.dstZ = 1;
  c.srcDevice = 0x300000;
  c.srcPitch = 32;
  c.srcHeight = 4;
  c.WidthInBytes = 16;
  c.Height = 4;
  c.Depth = 3;
  // dst: slice 1 on, 2 more slices of 8 rows and 3 rows more, then a row; src: 2 slices of 4, 3 rows, a row.
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&c)),
            (Ranges{{0x100000 + 8 * 128, (2 * 8 + 3) * 128 + 16}, {0x300000, (2 * 4 + 3) * 32 + 16}}));
  EXPECT_FALSE(uvmpool::tiering::has_host_side(&c));
  CUDA_MEMCPY3D_PEER peer{};
  peer.dstMemoryType = peer.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  peer.dstDevice = 0x100000;
  peer.srcDevice = 0x300000;
  peer.dstPitch = peer.srcPitch = 16;
  peer.WidthInBytes = 16;
  peer.Height = 1;
  peer.Depth = 1;
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&peer)), (Ranges{{0x100000, 16}, {0x300000, 16}}));
}

TEST(TransferRanges, NothingWhereTheDriverWillRefuse) {
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(static_cast<const CUDA_MEMCPY2D*>(nullptr))).empty());
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(static_cast<const CUDA_MEMCPY3D*>(nullptr))).empty());
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(static_cast<const CUDA_MEMCPY3D_PEER*>(nullptr))).empty());
  EXPECT_FALSE(uvmpool::tiering::has_host_side(static_cast<const CUDA_MEMCPY2D*>(nullptr)));
  CUDA_MEMCPY2D c{};
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x100000;
  c.dstPitch = SIZE_MAX / 2;
  c.WidthInBytes = 16;
  c.Height = 4;  // three pitches overflow
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(&c)).empty());
  c.dstPitch = 16;
  c.dstDevice = ~CUdeviceptr{0} - 8;  // the span runs off the address space
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(&c)).empty());
  c.dstDevice = 0x100000;
  c.Height = 0;
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(&c)).empty()) << "no rows, no bytes";
  c.Height = 1;
  c.dstMemoryType = static_cast<CUmemorytype>(0);
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(&c)).empty()) << "no type";
}

// A side whose base is 0 but whose offsets name an address: the span from there (the driver adds them).
TEST(TransferRanges, ASideOfBaseZeroStartsAtItsOffsets) {
  CUDA_MEMCPY2D c{};
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstXInBytes = 0x100000;
  c.dstPitch = 64;
  c.WidthInBytes = 16;
  c.Height = 2;
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(&c)), (Ranges{{0x100000, 64 + 16}}));
  c.dstXInBytes = 0;
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(&c)).empty()) << "address 0 is no one's";
}

// A memset's bytes: its elements times their size, or all a size holds when that wraps.
TEST(TransferRanges, AMemsetsBytesSaturateRatherThanWrap) {
  EXPECT_EQ(uvmpool::tiering::bytes_of(1024, 4), 4096u);
  EXPECT_EQ(uvmpool::tiering::bytes_of((std::size_t{1} << 62) + 256, 4), SIZE_MAX) << "wrapped to 1024 bytes before";
  EXPECT_EQ(uvmpool::tiering::bytes_of(std::size_t{1} << 63, 2), SIZE_MAX) << "wrapped to 0 before";
}

TEST(TransferRanges, A3DBatchCopyTouchesEachPointerOperandsSpan) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.dst.type = op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.dst.op.ptr.ptr = 0x100000;
  op.dst.op.ptr.rowLength = 64;   // rows 64 bytes apart
  op.dst.op.ptr.layerHeight = 4;  // layers 4 rows apart
  op.src.op.ptr.ptr = 0x300000;   // rows and layers as the extent: packed
  op.extent = {16, 2, 3};
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(op)),
            (Ranges{{0x100000, (2 * 4 + 1) * 64 + 16}, {0x300000, 16 * 2 * 3}}));
  // Against an array, elements are the array's (up to 16 bytes): the pointer's span is 16 times as wide.
  op.src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  EXPECT_EQ(list(uvmpool::tiering::ranges_of(op)), (Ranges{{0x100000, 16 * ((2 * 4 + 1) * 64 + 16)}}));
  op.dst.op.ptr.rowLength = SIZE_MAX / 8;
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(op)).empty()) << "the pitch overflows";
  op.dst.type = static_cast<CUmemcpy3DOperandType>(0);
  op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.extent.depth = 0;
  EXPECT_TRUE(list(uvmpool::tiering::ranges_of(op)).empty()) << "no type, and no layers";
}

TEST(TransferRanges, PitchedMemsetsAndFlatRanges) {
  EXPECT_EQ(list(uvmpool::tiering::pitched_range(0x100000, 64, 4, 4, 3)), (Ranges{{0x100000, 2 * 64 + 16}}));
  EXPECT_TRUE(list(uvmpool::tiering::pitched_range(0x100000, 64, SIZE_MAX, 4, 3)).empty()) << "width overflows";
  EXPECT_TRUE(list(uvmpool::tiering::pitched_range(0x100000, 64, 4, 4, 0)).empty());
  EXPECT_EQ(list(uvmpool::tiering::flat_ranges({0x100000, 8}, {0x200000, 8})), (Ranges{{0x100000, 8}, {0x200000, 8}}));
  EXPECT_EQ(list(uvmpool::tiering::flat_ranges({0, 8}, {0x200000, 0})), Ranges{}) << "no address or no bytes";
}

TEST(TransferRanges, AMemoryOperationBatchTouchesTheWordsOfItsWaitsAndWrites) {
  std::vector<CUstreamBatchMemOpParams> ops(6);
  ops[0].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_32, 0x100000, {1}, 0, 0};
  ops[1].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_64, 0x200008, {2}, 0, 0};
  ops[2].memoryBarrier = {CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_GPU};
  ops[3].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_64, 0x300000, {3}, 0, 0};
  ops[4].flushRemoteWrites = {CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, 0};
  ops[5].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, 0x400004, {4}, 0, 0};
  const auto list_of = [](const std::vector<TransferRange>& r) {
    Ranges out;
    for (const TransferRange& x : r) out.emplace_back(x.address, x.bytes);
    return out;
  };
  EXPECT_EQ(list_of(uvmpool::tiering::mem_op_ranges(ops.data(), 6)),
            (Ranges{{0x100000, 4}, {0x200008, 8}, {0x300000, 8}, {0x400004, 4}}));
  EXPECT_EQ(list_of(uvmpool::tiering::mem_op_ranges(ops.data(), 2)), (Ranges{{0x100000, 4}, {0x200008, 8}}))
      << "only the count given";
  EXPECT_TRUE(uvmpool::tiering::mem_op_ranges(nullptr, 6).empty()) << "no array: the driver refuses it";
  // The most a batch may hold, each read; past it the driver refuses the batch whole, and nothing of
  // the array is read (it may be shorter than the count says).
  std::vector<CUstreamBatchMemOpParams> many(uvmpool::driver::kMaxBatchMemOps);
  for (CUstreamBatchMemOpParams& op : many) op.writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, 0x500000, {5}, 0, 0};
  EXPECT_EQ(uvmpool::tiering::mem_op_ranges(many.data(), uvmpool::driver::kMaxBatchMemOps).size(), many.size());
  EXPECT_TRUE(uvmpool::tiering::mem_op_ranges(many.data(), 0xffffffffu).empty());
}

}  // namespace
