// Strided, peer and batched (flat and 3D) copies and pitched memsets (src/sim/strided_copies.cpp): the bytes of
// every row land where the pitches say and nothing between rows changes, every variant works, and
// what the real driver refuses (a pitch narrower than a row, arrays, unknown contexts, a batch on
// the legacy stream or with attributes not starting at its first copy) is an error, not a crash.
#include <cstring>
#include <numeric>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using StridedCopies = SimTest;
using PitchedMemsets = SimTest;

const unsigned char* bytes(CUdeviceptr p) { return reinterpret_cast<const unsigned char*>(p); }

// A 2D copy of `height` rows of `width` bytes from host rows `src_pitch` apart to device rows
// `dst_pitch` apart, starting at column x and row y of the device side.
CUDA_MEMCPY2D host_to_device(const void* src, std::size_t src_pitch, CUdeviceptr dst, std::size_t dst_pitch,
                             std::size_t width, std::size_t height, std::size_t x = 0, std::size_t y = 0) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = src_pitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = dst_pitch;
  c.dstXInBytes = x;
  c.dstY = y;
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

TEST_F(StridedCopies, A2DCopyWritesEachRowAtItsPitchAndNothingBetween) {
  std::vector<unsigned char> in(4 * 16);
  std::iota(in.begin(), in.end(), 1);
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD8(p, 0xEE, 4096));
  // 4 rows of 10 bytes, 16 apart in host memory, to 64 apart on the device, from column 3 of row 1.
  CUDA_MEMCPY2D c = host_to_device(in.data(), 16, p, 64, 10, 4, 3, 1);
  ASSERT_CU(cuMemcpy2D(&c));
  for (std::size_t r = 0; r < 4; ++r) {
    const CUdeviceptr row = p + (1 + r) * 64 + 3;
    EXPECT_EQ(std::memcmp(bytes(row), in.data() + r * 16, 10), 0) << "row " << r;
    EXPECT_EQ(bytes(row)[10], 0xEE) << "past row " << r;
    EXPECT_EQ(bytes(row)[-1], 0xEE) << "before row " << r;
  }
  EXPECT_EQ(bytes(p)[64 + 2], 0xEE);
  // Back to the host through the other forms, device to host.
  std::vector<unsigned char> out(4 * 16, 0);
  CUDA_MEMCPY2D back{};
  back.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  back.srcDevice = p + 64 + 3;
  back.srcPitch = 64;
  back.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  back.dstDevice = reinterpret_cast<CUdeviceptr>(out.data());
  back.dstPitch = 16;
  back.WidthInBytes = 10;
  back.Height = 4;
  ASSERT_CU(cuMemcpy2DUnaligned(&back));
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(std::memcmp(out.data() + r * 16, in.data() + r * 16, 10), 0);
  std::fill(out.begin(), out.end(), 0);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuMemcpy2DAsync(&back, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(std::memcmp(out.data() + 3 * 16, in.data() + 3 * 16, 10), 0);
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(StridedCopies, A3DCopyWalksSlicesOfRows) {
  // 2 slices of 3 rows of 8 bytes; the host side packed, the device side 32 bytes a row, 4 rows a slice.
  std::vector<unsigned char> in(2 * 3 * 8);
  std::iota(in.begin(), in.end(), 1);
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD8(p, 0, 4096));
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = in.data();
  c.srcPitch = 8;
  c.srcHeight = 3;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = p;
  c.dstPitch = 32;
  c.dstHeight = 4;
  c.dstZ = 1;  // from the second slice on
  c.WidthInBytes = 8;
  c.Height = 3;
  c.Depth = 2;
  ASSERT_CU(cuMemcpy3D(&c));
  for (std::size_t z = 0; z < 2; ++z)
    for (std::size_t r = 0; r < 3; ++r)
      EXPECT_EQ(std::memcmp(bytes(p + ((1 + z) * 4 + r) * 32), in.data() + (z * 3 + r) * 8, 8), 0)
          << "slice " << z << " row " << r;
  EXPECT_EQ(bytes(p + 3 * 32)[0], 0) << "the first slice's fourth row is outside the copy";
  ASSERT_CU(cuMemsetD8(p, 0, 4096));
  ASSERT_CU(cuMemcpy3DAsync(&c, CU_STREAM_PER_THREAD));
  ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_EQ(std::memcmp(bytes(p + (2 * 4 + 2) * 32), in.data() + 5 * 8, 8), 0);
}

TEST_F(StridedCopies, WhatTheDriverRefusesIsAnErrorNotACrash) {
  std::vector<unsigned char> host(256);
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(nullptr));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(nullptr));
  CUDA_MEMCPY2D c = host_to_device(host.data(), 8, p, 64, 16, 2);  // the host pitch narrower than a row
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c));
  c = host_to_device(host.data(), 16, p, 64, 16, 2);
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemcpy2D(&c)) << "the simulator has no arrays";
  c = host_to_device(host.data(), 16, p, 64, 16, 2);
  c.dstMemoryType = static_cast<CUmemorytype>(0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c));
  c = host_to_device(host.data(), 16, p, 4096, 16, 2);  // the second row past the allocation's end
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c));
  c = host_to_device(host.data(), 16, p, SIZE_MAX / 2, 16, 3);  // rows that wrap the address space
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c));
  c = host_to_device(host.data(), 16, p, 64, 16, 0);
  EXPECT_CU(cuMemcpy2D(&c)) << "no rows: nothing to do";
  CUDA_MEMCPY3D d{};
  d.srcMemoryType = CU_MEMORYTYPE_HOST;
  d.srcHost = host.data();
  d.srcPitch = 16;
  d.srcHeight = 1;  // slices of one row for a copy of two rows a slice
  d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  d.dstDevice = p;
  d.dstPitch = 16;
  d.dstHeight = 2;
  d.WidthInBytes = 16;
  d.Height = 2;
  d.Depth = 2;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&d));
  d.srcHeight = 2;
  d.srcLOD = 1;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&d));
  d.srcLOD = 0;
  EXPECT_CU(cuMemcpy3D(&d));
}

TEST_F(StridedCopies, PeerCopiesNameBothContexts) {
  CUcontext context = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&context));
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, 64));
  ASSERT_CU(cuMemAlloc(&b, 64));
  ASSERT_CU(cuMemsetD32(a, 0x01020304u, 16));
  ASSERT_CU(cuMemcpyPeer(b, context, a, context, 64));
  EXPECT_EQ(std::memcmp(bytes(a), bytes(b), 64), 0);
  ASSERT_CU(cuMemsetD32(a, 9u, 16));
  ASSERT_CU(cuMemcpyPeerAsync(b, context, a, context, 64, CU_STREAM_PER_THREAD));
  ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(b)[15], 9u);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemcpyPeer(b, nullptr, a, context, 64));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemcpyPeer(b, context, a, reinterpret_cast<CUcontext>(&a), 64));
  CUDA_MEMCPY3D_PEER c{};
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = a;
  c.dstDevice = b + 32;
  c.srcContext = c.dstContext = context;
  c.srcPitch = c.dstPitch = 16;
  c.srcHeight = c.dstHeight = 2;
  c.WidthInBytes = 4;
  c.Height = 2;
  c.Depth = 1;
  ASSERT_CU(cuMemsetD32(a, 7u, 16));
  ASSERT_CU(cuMemsetD32(b, 0u, 16));
  ASSERT_CU(cuMemcpy3DPeer(&c));
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(b)[8], 7u);
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(b)[9], 0u) << "between rows";
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(b)[12], 7u);
  c.srcContext = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemcpy3DPeerAsync(&c, nullptr));
}

// As driver 580 does (a SIGSEGV there): uvmpool's hooks must refuse a null descriptor themselves.
TEST_F(StridedCopies, APeerCopyOfANullDescriptorCrashesAsTheRealDriversDoes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)cuMemcpy3DPeer(nullptr), "cuMemcpy3DPeer\\(NULL\\): the real driver crashes");
  EXPECT_DEATH((void)cuMemcpy3DPeerAsync(nullptr, nullptr), "cuMemcpy3DPeerAsync\\(NULL\\)");
}

TEST_F(StridedCopies, ABatchCopiesEachPieceAndNamesTheOneThatFailed) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  std::uint32_t in[2] = {0xAAAAAAAAu, 0xBBBBBBBBu}, out = 0;
  CUdeviceptr dsts[3] = {p, p + 64, reinterpret_cast<CUdeviceptr>(&out)};
  CUdeviceptr srcs[3] = {reinterpret_cast<CUdeviceptr>(&in[0]), reinterpret_cast<CUdeviceptr>(&in[1]), p + 64};
  std::size_t sizes[3] = {4, 4, 4};
  CUmemcpyAttributes attrs{};
  attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  std::size_t first = 0;
  ASSERT_CU(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attrs, &first, 1, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(p)[0], in[0]);
  EXPECT_EQ(out, in[1]);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attrs, &first, 1, nullptr))
      << "never on the legacy default stream";
  std::size_t second = 1;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attrs, &second, 1, stream))
      << "the attributes must start at the first copy";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyBatchAsync(nullptr, srcs, sizes, 3, &attrs, &first, 1, stream));
  // The first version (CUDA 12.8) names the copy that failed: here the second, into freed memory.
  using V1 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, std::size_t*, std::size_t, CUmemcpyAttributes*, std::size_t*,
                          std::size_t, std::size_t*, CUstream);
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_CU(cuGetProcAddress("cuMemcpyBatchAsync", &pfn, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CUdeviceptr gone = 0;
  ASSERT_CU(cuMemAlloc(&gone, 64));
  ASSERT_CU(cuMemFree(gone));
  dsts[1] = gone;
  std::size_t failed = 0;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE,
               reinterpret_cast<V1>(pfn)(dsts, srcs, sizes, 3, &attrs, &first, 1, &failed, stream));
  EXPECT_EQ(failed, 1u);
  EXPECT_CU(cuStreamSynchronize(stream));
  EXPECT_CU(cuStreamDestroy(stream));
}

// One copy of a 3D batch between two pointers: `width` bytes a row, rows `row` bytes apart and
// layers `layer` rows apart on both sides.
CUDA_MEMCPY3D_BATCH_OP op_3d(CUdeviceptr dst, CUdeviceptr src, std::size_t row, std::size_t layer, CUextent3D e) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  for (auto [side, p] : {std::pair{&op.dst, dst}, std::pair{&op.src, src}}) {
    side->type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    side->op.ptr.ptr = p;
    side->op.ptr.rowLength = row;
    side->op.ptr.layerHeight = layer;
  }
  op.extent = e;
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  return op;
}

TEST_F(StridedCopies, A3DBatchCopiesEachRowOfEachLayerAndNamesTheOneThatFailed) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD8(p, 0, 4096));
  std::vector<unsigned char> in(2 * 3 * 32);  // 2 layers of 3 rows, 32 bytes apart
  std::iota(in.begin(), in.end(), 1);
  // 8 bytes of each of 2 rows of each of 2 layers (layers of 3 rows), from the host rows 32 apart to
  // device rows 64 apart; then a second copy, flat, back to the host.
  unsigned char back[8] = {};
  CUDA_MEMCPY3D_BATCH_OP ops[2] = {
      op_3d(p, reinterpret_cast<CUdeviceptr>(in.data()), 0, 0, {8, 2, 2}),
      op_3d(reinterpret_cast<CUdeviceptr>(back), p, 0, 0, {8, 1, 1})};
  ops[0].src.op.ptr.rowLength = 32;
  ops[0].src.op.ptr.layerHeight = 3;
  ops[0].dst.op.ptr.rowLength = 64;
  ops[0].dst.op.ptr.layerHeight = 3;
  ASSERT_CU(cuMemcpy3DBatchAsync(2, ops, 0, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  for (std::size_t z = 0; z < 2; ++z)
    for (std::size_t y = 0; y < 2; ++y) {
      const std::size_t from = (z * 3 + y) * 32, to = (z * 3 + y) * 64;
      EXPECT_EQ(std::memcmp(bytes(p + to), in.data() + from, 8), 0) << "layer " << z << ", row " << y;
      EXPECT_EQ(bytes(p + to)[8], 0) << "past layer " << z << ", row " << y;
    }
  EXPECT_EQ(bytes(p + 2 * 64)[0], 0) << "the third row of a layer is not copied";
  EXPECT_EQ(std::memcmp(back, in.data(), 8), 0) << "the second copy of the batch";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DBatchAsync(2, ops, 0, nullptr)) << "never on the legacy stream";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DBatchAsync(2, ops, 1, stream)) << "flags: none defined";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DBatchAsync(0, ops, 0, stream));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DBatchAsync(2, nullptr, 0, stream));
  // The first version (CUDA 12.8) names the copy that failed: a row narrower than the width, an
  // array (none in the simulator).
  using V1 = CUresult (*)(std::size_t, CUDA_MEMCPY3D_BATCH_OP*, std::size_t*, unsigned long long, CUstream);
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_CU(cuGetProcAddress("cuMemcpy3DBatchAsync", &pfn, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  std::size_t failed = 0;
  ops[1].src.op.ptr.rowLength = 4;
  ops[1].extent.height = 2;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, reinterpret_cast<V1>(pfn)(2, ops, &failed, 0, stream));
  EXPECT_EQ(failed, 1u);
  ops[0].src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, reinterpret_cast<V1>(pfn)(2, ops, &failed, 0, stream));
  EXPECT_EQ(failed, 0u);
  EXPECT_CU(cuStreamSynchronize(stream));
  EXPECT_CU(cuStreamDestroy(stream));
}

TEST_F(PitchedMemsets, EachRowIsSetAndNothingBetween) {
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD8(p, 0, 4096));
  ASSERT_CU(cuMemsetD2D32(p, 64, 0xCAFEF00Du, 4, 3));  // 3 rows of 16 bytes, 64 apart
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(p + r * 64)[3], 0xCAFEF00Du) << "row " << r;
    EXPECT_EQ(reinterpret_cast<const std::uint32_t*>(p + r * 64)[4], 0u) << "past row " << r;
  }
  ASSERT_CU(cuMemsetD2D16Async(p + 1024, 32, 0xBEEF, 2, 2, CU_STREAM_PER_THREAD));
  ASSERT_CU(cuMemsetD2D8Async(p + 2048, 8, 0x5A, 3, 2, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(reinterpret_cast<const std::uint16_t*>(p + 1024 + 32)[1], 0xBEEF);
  EXPECT_EQ(bytes(p + 2048 + 8)[2], 0x5A);
  EXPECT_EQ(bytes(p + 2048 + 8)[3], 0);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D32(p, 8, 0u, 4, 2)) << "a pitch narrower than a row";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D16(p, 33, 0, 4, 2)) << "a pitch not of whole elements";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D8(p, 4096, 0, 1, 2)) << "the second row past the end";
  EXPECT_CU(cuMemsetD2D8(p, 8, 0, 4, 0));
}

}  // namespace
}  // namespace simtest
