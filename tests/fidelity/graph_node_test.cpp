// Graphs built node by node, as XLA's command buffers build theirs: CUDA 11's kernel node calls, memcpy
// and memset nodes, and cuGraphAddNode's generic nodes run what they were given, and take updates in
// the executable graph; a set call naming a node of another type is refused. What uvmpool's node hooks
// (src/hooks/graph_node_hooks.cpp) forward, and the simulator (src/sim/graphs.cpp) must answer alike.
#include <cstring>
#include <vector>

#include "catalog_ptx.h"
#include "fidelity.h"
#include "sim/sim_control.h"

namespace fidelity {
namespace {

constexpr std::size_t kWords = 1024;

class GraphNodes : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (IsSkipped()) return;
    const bool sim = uvmpool::driver::real_symbol("uvmpool_sim_now_ns") != nullptr;
    ASSERT_CU(CU(cuModuleLoadData, &module, sim ? UVMPOOL_SIM_MODULE_IMAGE : uvmpool::bench::kCatalogPtx));
    ASSERT_CU(CU(cuModuleGetFunction, &fill, module, "uvmpool_fill_u32"));
    ASSERT_CU(CU(cuCtxGetCurrent, &ctx));
    for (CUdeviceptr& p : b) {
      ASSERT_CU(CU(cuMemAlloc_v2, &p, kWords * 4));
      ASSERT_CU(CU(cuMemsetD32_v2, p, 0, kWords));
    }
  }
  void TearDown() override {
    for (CUdeviceptr p : b)
      if (p != 0) CU(cuMemFree_v2, p);
    if (module != nullptr) CU(cuModuleUnload, module);
    DriverTest::TearDown();
  }
  std::vector<std::uint32_t> read(CUdeviceptr p) {
    std::vector<std::uint32_t> out(kWords);
    EXPECT_CU(CU(cuMemcpyDtoH_v2, out.data(), p, kWords * 4));
    return out;
  }
  static std::vector<std::uint32_t> all(std::uint32_t v) { return std::vector<std::uint32_t>(kWords, v); }
  CUDA_MEMCPY3D copy_of(CUdeviceptr to, CUdeviceptr from) const {
    CUDA_MEMCPY3D c{};
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = from;
    c.dstDevice = to;
    c.WidthInBytes = kWords * 4;
    c.Height = c.Depth = 1;
    return c;
  }
  CUmodule module = nullptr;
  CUfunction fill = nullptr;
  CUcontext ctx = nullptr;
  CUdeviceptr b[6] = {};
};

TEST_F(GraphNodes, EachNodeCallRunsWhatItWasLastGivenAndASetOfAnotherTypeIsRefused) {
  std::uint64_t count = kWords;
  CUdeviceptr target = b[0];
  std::uint32_t value = 10;
  void* params[] = {&target, &count, &value};
  CUDA_KERNEL_NODE_PARAMS_v1 k1{};  // CUDA 11's parameters
  k1.func = fill;
  k1.gridDimX = k1.gridDimY = k1.gridDimZ = k1.blockDimY = k1.blockDimZ = 1;
  k1.blockDimX = 32;
  k1.kernelParams = params;
  CUgraph graph = nullptr;
  ASSERT_CU(CU(cuGraphCreate, &graph, 0u));
  CUgraphNode n[5] = {};
  // b0 = 10, b1 = b0 (memcpy), b2 = 12 (memset), b3 = 13 (generic memset), an empty node.
  ASSERT_CU(CU(cuGraphAddKernelNode, &n[0], graph, nullptr, std::size_t{0}, &k1));
  const CUDA_MEMCPY3D copy = copy_of(b[1], b[0]);
  ASSERT_CU(CU(cuGraphAddMemcpyNode, &n[1], graph, &n[0], std::size_t{1}, &copy, ctx));
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = b[2];
  set.value = 12;
  set.elementSize = 4;
  set.width = kWords;
  set.height = 1;
  ASSERT_CU(CU(cuGraphAddMemsetNode, &n[2], graph, &n[1], std::size_t{1}, &set, ctx));
  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_MEMSET;
  g.memset = {b[3], 0, 13, 4, kWords, 1, ctx};
  ASSERT_CU(CU(cuGraphAddNode_v2, &n[3], graph, &n[2], nullptr, std::size_t{1}, &g));
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(CU(cuGraphAddNode, &n[4], graph, &n[3], std::size_t{1}, &empty));
  set.elementSize = 3;
  CUgraphNode refused = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphAddMemsetNode, &refused, graph, nullptr, std::size_t{0}, &set, ctx));
  set.elementSize = 4;
  CUgraphExec exec = nullptr;
  ASSERT_CU(CU(cuGraphInstantiateWithFlags, &exec, graph, 0ull));
  ASSERT_CU(CU(cuGraphLaunch, exec, nullptr));
  ASSERT_CU(CU(cuCtxSynchronize));
  EXPECT_EQ(read(b[0]), all(10));
  EXPECT_EQ(read(b[1]), all(10));
  EXPECT_EQ(read(b[2]), all(12));
  EXPECT_EQ(read(b[3]), all(13));

  // In the executable graph: b0's kernel fills b4 with 14, the memcpy copies into b5, the generic
  // memset sets b3 to 15 (each 1-dimensional, of the same context, as exec updates require).
  target = b[4];
  value = 14;
  ASSERT_CU(CU(cuGraphExecKernelNodeSetParams, exec, n[0], &k1));
  const CUDA_MEMCPY3D copy5 = copy_of(b[5], b[0]);
  ASSERT_CU(CU(cuGraphExecMemcpyNodeSetParams, exec, n[1], &copy5, ctx));
  g.memset.value = 15;
  ASSERT_CU(CU(cuGraphExecNodeSetParams, exec, n[3], &g));
  // A set call naming a node of another type: INVALID_VALUE. Measured (H200, driver 580.159.04).
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphExecNodeSetParams, exec, n[1], &g)) << "a memcpy node as a memset";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphExecMemsetNodeSetParams, exec, n[0], &set, ctx)) << "a kernel node";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, CU(cuGraphMemcpyNodeSetParams, n[2], &copy)) << "a memset node";
  ASSERT_CU(CU(cuGraphLaunch, exec, nullptr));
  ASSERT_CU(CU(cuCtxSynchronize));
  EXPECT_EQ(read(b[4]), all(14));
  EXPECT_EQ(read(b[5]), all(10)) << "b0, which the kernel no longer fills, copied";
  EXPECT_EQ(read(b[3]), all(15));
  ASSERT_CU(CU(cuGraphExecDestroy, exec));
  ASSERT_CU(CU(cuGraphDestroy, graph));
}

}  // namespace
}  // namespace fidelity
