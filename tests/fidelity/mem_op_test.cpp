// Stream memory operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64, cuStreamBatchMemOp) and
// graphs' memory-operation nodes: a batch runs its waits and writes in order, on device memory and on
// host-located VMM memory (what uvmpool maps spilled memory with), and a memory-operation node runs
// what it was last given. What uvmpool's hooks (src/hooks/mem_op_hooks.cpp, graph_node_hooks.cpp)
// forward, and the simulator (src/sim/launch.cpp, graphs.cpp) must answer alike.
#include <cstring>
#include <vector>

#include "fidelity.h"

namespace fidelity {
namespace {

class MemOps : public DriverTest {
 protected:
  static CUstreamBatchMemOpParams write32(CUdeviceptr p, std::uint32_t value) {
    CUstreamBatchMemOpParams op{};
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = p;
    op.writeValue.value = value;
    return op;
  }
  static CUstreamBatchMemOpParams write64(CUdeviceptr p, std::uint64_t value) {
    CUstreamBatchMemOpParams op{};
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op.writeValue.address = p;
    op.writeValue.value64 = value;
    return op;
  }
  static CUstreamBatchMemOpParams wait32(CUdeviceptr p, std::uint32_t value, unsigned flags) {
    CUstreamBatchMemOpParams op{};
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = p;
    op.waitValue.value = value;
    op.waitValue.flags = flags;
    return op;
  }
  std::uint64_t read64(CUdeviceptr p) {
    std::uint64_t v = 0;
    EXPECT_CU(CU(cuMemcpyDtoH_v2, &v, p, sizeof v));
    return v;
  }

  // Each operation kind on 16 bytes at `p`: a write of a word, a batch writing eight bytes and a word
  // and waiting for them, a wait for eight bytes, a barrier; read back through a copy.
  void every_operation_reaches(CUdeviceptr p) {
    ASSERT_CU(CU(cuMemsetD32_v2, p, 0, std::size_t{4}));
    ASSERT_CU(CU(cuStreamWriteValue32_v2, stream, p, 5u, 0u));
    ASSERT_CU(CU(cuStreamWriteValue64_v2, stream, p + 8, cuuint64_t{0x0123456789abcdefull}, 0u));
    CUstreamBatchMemOpParams ops[4] = {write64(p, 0x1100000022ull), wait32(p, 0x22, CU_STREAM_WAIT_VALUE_EQ),
                                       write32(p + 4, 0x33), wait32(p + 4, 0x30, CU_STREAM_WAIT_VALUE_GEQ)};
    ASSERT_CU(CU(cuStreamBatchMemOp_v2, stream, 4u, ops, 0u));
    CUstreamBatchMemOpParams barrier{};
    barrier.memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    barrier.memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    ASSERT_CU(CU(cuStreamBatchMemOp_v2, stream, 1u, &barrier, 0u));
    ASSERT_CU(CU(cuStreamWaitValue64_v2, stream, p + 8, cuuint64_t{0x0123456789abcdefull}, CU_STREAM_WAIT_VALUE_EQ));
    ASSERT_CU(CU(cuStreamWaitValue32_v2, stream, p, 0x22u, CU_STREAM_WAIT_VALUE_EQ));
    ASSERT_CU(CU(cuStreamSynchronize, stream));
    EXPECT_EQ(read64(p), 0x0000003300000022ull) << "the batch's 64-bit write, then its 32-bit write above it";
    EXPECT_EQ(read64(p + 8), 0x0123456789abcdefull);
  }

  void SetUp() override {
    DriverTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_CU(CU(cuStreamCreate, &stream, 0u));
  }
  void TearDown() override {
    if (stream != nullptr) CU(cuStreamDestroy_v2, stream);
    DriverTest::TearDown();
  }
  CUstream stream = nullptr;
};

TEST_F(MemOps, EveryOperationReachesDeviceMemory) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 4096));
  every_operation_reaches(p);
}

TEST_F(MemOps, EveryOperationReachesHostLocatedVmmMemory) {
  int supported = 0;
  ASSERT_CU(CU(cuDeviceGetAttribute, &supported, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  ASSERT_EQ(supported, 1) << "uvmpool's host tier needs host-NUMA VMM memory";
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  std::size_t bytes = 0;
  ASSERT_CU(vmm_host(&va, &h, &bytes));
  every_operation_reaches(va);
}

// The driver checks a wait's or a write's address when it is called, as it does a memset's: on a
// reserved range with nothing mapped, and on one unmapped after use, both answer INVALID_VALUE and
// queue nothing (measured, H200, driver 580.159.04, with a probe in a child process). So uvmpool's
// hooks keep these calls out of a commit's remaps (src/hooks/mem_op_hooks.cpp).
TEST_F(MemOps, AWordNotMappedIsRefusedWhenCalled) {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(vmm_device(&va, &h, gran));
  ASSERT_CU(CU(cuStreamWriteValue32_v2, stream, va, 1u, 0u));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  ASSERT_CU(mem_unmap(va, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamWriteValue32_v2, stream, va, 5u, 0u)) << "unmapped after use";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamWaitValue32_v2, stream, va, 0u, 0u)) << "unmapped after use";
  CUdeviceptr never = 0;
  ASSERT_CU(address_reserve(&never, gran));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamWriteValue32_v2, stream, never, 5u, 0u)) << "never mapped";
  CUstreamBatchMemOpParams op = wait32(never, 0, CU_STREAM_WAIT_VALUE_GEQ);
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamBatchMemOp_v2, stream, 1u, &op, 0u)) << "never mapped, batched";
  ASSERT_CU(CU(cuStreamSynchronize, stream));
}

// A batch the driver refuses runs none of its operations. (A null array with a count crashes driver
// 580.159.04 inside cuStreamBatchMemOp_v2, measured on the H200: uvmpool's hook refuses it instead,
// src/hooks/mem_op_hooks.cpp, so it is not asked of a real driver here.)
class BadBatches : public MemOps {
 protected:
  void refused_whole(CUstreamBatchMemOpParams bad, const char* what) {
    CUdeviceptr p = 0;
    ASSERT_CU(mem_alloc(&p, 4096));
    ASSERT_CU(CU(cuMemsetD32_v2, p, 0, std::size_t{2}));
    CUstreamBatchMemOpParams ops[2] = {write32(p, 9), bad};
    EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamBatchMemOp_v2, stream, 2u, ops, 0u)) << what;
    ASSERT_CU(CU(cuStreamSynchronize, stream));
    EXPECT_EQ(read64(p), 0u) << "a refused batch ran its first operation";
  }
};

TEST_F(BadBatches, AnUnknownOperation) {
  CUstreamBatchMemOpParams op{};
  op.operation = static_cast<CUstreamBatchMemOpType>(7);  // no such operation (within the enum's range)
  refused_whole(op, "an unknown operation");
}

// Measured (H200, driver 580.159.04): 255 operations run, 256 are refused whole.
TEST_F(BadBatches, MoreThan255Operations) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 4096));
  ASSERT_CU(CU(cuMemsetD32_v2, p, 0, std::size_t{256}));
  std::vector<CUstreamBatchMemOpParams> ops;
  for (CUdeviceptr word = p; word < p + 256 * 4; word += 4) ops.push_back(write32(word, 1));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuStreamBatchMemOp_v2, stream, 256u, ops.data(), 0u));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  EXPECT_EQ(read64(p), 0u) << "a refused batch ran its first operation";
  ASSERT_CU(CU(cuStreamBatchMemOp_v2, stream, 255u, ops.data(), 0u));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  EXPECT_EQ(read64(p + 254 * 4), 1u) << "the 255th operation";
}

TEST_F(BadBatches, AWaitOfBadFlags) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 4096));
  refused_whole(wait32(p, 0, 0xf0u), "a wait's bad flags");
}

// Measured (H200, driver 580.159.04): a batch of no operations is taken, even with a null array; a
// node of none too, and a node of a null array with a count is refused.
TEST_F(MemOps, NoOperationsAreTakenANullArrayWithACountIsNotANode) {
  CUstreamBatchMemOpParams op = write32(0, 0);
  EXPECT_CU(CU(cuStreamBatchMemOp_v2, stream, 0u, &op, 0u));
  EXPECT_CU(CU(cuStreamBatchMemOp_v2, stream, 0u, nullptr, 0u));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  CUgraph graph = nullptr;
  ASSERT_CU(CU(cuGraphCreate, &graph, 0u));
  CUgraphNode node = nullptr;
  CUDA_BATCH_MEM_OP_NODE_PARAMS m{ctx, 1, nullptr, 0};
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphAddBatchMemOpNode, &node, graph, nullptr, std::size_t{0}, &m));
  m.count = 0;
  EXPECT_CU(CU(cuGraphAddBatchMemOpNode, &node, graph, nullptr, std::size_t{0}, &m));
  CUgraphExec exec = nullptr;
  ASSERT_CU(CU(cuGraphInstantiateWithFlags, &exec, graph, 0ull));
  ASSERT_CU(CU(cuGraphLaunch, exec, stream));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  ASSERT_CU(CU(cuGraphExecDestroy, exec));
  ASSERT_CU(CU(cuGraphDestroy, graph));
}

TEST_F(MemOps, AMemoryOperationNodeRunsWhatItWasLastGiven) {
  CUdeviceptr p = 0;
  ASSERT_CU(mem_alloc(&p, 4096));
  ASSERT_CU(CU(cuMemsetD32_v2, p, 0, std::size_t{6}));
  CUgraph graph = nullptr;
  ASSERT_CU(CU(cuGraphCreate, &graph, 0u));
  CUstreamBatchMemOpParams op = write32(p, 40);
  CUDA_BATCH_MEM_OP_NODE_PARAMS m{ctx, 1, &op, 0};
  CUgraphNode typed = nullptr, generic = nullptr;
  ASSERT_CU(CU(cuGraphAddBatchMemOpNode, &typed, graph, nullptr, std::size_t{0}, &m));
  CUstreamBatchMemOpParams ops2[2] = {wait32(p, 40, CU_STREAM_WAIT_VALUE_EQ), write64(p + 8, 0x4200000041ull)};
  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  g.memOp = {ctx, 2, ops2, 0};
  ASSERT_CU(CU(cuGraphAddNode, &generic, graph, &typed, std::size_t{1}, &g));
  CUgraphExec exec = nullptr;
  ASSERT_CU(CU(cuGraphInstantiateWithFlags, &exec, graph, 0ull));
  ASSERT_CU(CU(cuGraphLaunch, exec, stream));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  EXPECT_EQ(read64(p), 40u);
  EXPECT_EQ(read64(p + 8), 0x4200000041ull);

  // In the executable graph: the typed node writes 43 at p + 4 instead, the generic one waits for it.
  op = write32(p + 4, 43);
  ASSERT_CU(CU(cuGraphExecBatchMemOpNodeSetParams, exec, typed, &m));
  ops2[0] = wait32(p + 4, 43, CU_STREAM_WAIT_VALUE_EQ);
  ops2[1] = write64(p + 8, 0x44ull);
  ASSERT_CU(CU(cuGraphExecNodeSetParams, exec, generic, &g));
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = p;
  set.elementSize = 4;
  set.width = set.height = 1;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphExecMemsetNodeSetParams, exec, typed, &set, ctx))
      << "a memory-operation node as a memset";
  ASSERT_CU(CU(cuGraphLaunch, exec, stream));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  EXPECT_EQ(read64(p), 0x0000002b00000028ull) << "40 left, 43 above it";
  EXPECT_EQ(read64(p + 8), 0x44ull);

  // In the graph (reaching later instantiations, not the executable graph made before): the typed node
  // writes 45 at p + 16; the generic node still waits for 40 at p.
  op = write32(p + 16, 45);
  ASSERT_CU(CU(cuGraphBatchMemOpNodeSetParams, typed, &m));
  CUgraphExec second = nullptr;
  ASSERT_CU(CU(cuGraphInstantiateWithFlags, &second, graph, 0ull));
  ASSERT_CU(CU(cuGraphLaunch, second, stream));
  ASSERT_CU(CU(cuStreamSynchronize, stream));
  EXPECT_EQ(read64(p + 16), 45u);
  EXPECT_EQ(read64(p + 8), 0x4200000041ull) << "the graph's own generic node";
  ASSERT_CU(CU(cuGraphExecDestroy, second));
  ASSERT_CU(CU(cuGraphExecDestroy, exec));
  ASSERT_CU(CU(cuGraphDestroy, graph));
}

}  // namespace
}  // namespace fidelity
