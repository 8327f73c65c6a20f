// Stream capture and graphs (src/sim/graphs.cpp, timeline.h): captured work runs only when the graph
// is launched, as often as it is; node updates and whole-graph updates change what an executable
// graph runs; what the driver refuses in a capture is refused, and spoils the capture.
#include <algorithm>
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace simtest {
namespace {

using Graphs = KernelTest;

std::vector<std::uint32_t> filled(std::size_t count, std::uint32_t value) { return std::vector<std::uint32_t>(count, value); }

CUDA_KERNEL_NODE_PARAMS fill_node(CUfunction fill, void** params) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = fill;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = params;
  return p;
}

TEST_F(Graphs, CapturedWorkRunsOnlyWhenTheGraphIsLaunchedAndEachTime) {
  constexpr std::uint64_t kCount = 256;
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kCount * 4));
  ASSERT_CU(cuMemAlloc(&b, kCount * 4));
  ASSERT_CU(cuMemsetD32(a, 1, kCount));
  ASSERT_CU(cuMemsetD32(b, 0, kCount));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  ASSERT_CU(cuStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(id, 0u);
  // b = a, then a = 9: replayed in this order, b holds a's value from before the launch.
  ASSERT_CU(launch(kernel("uvmpool_copy"), s, b, a, std::uint64_t{kCount * 4}));
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), s, a, kCount, std::uint32_t{9}));
  ASSERT_CU(cuMemsetD32Async(a + 4, 5, 1, s));
  EXPECT_EQ(read_back(a, kCount), filled(kCount, 1)) << "captured work must not run";
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &graph));
  ASSERT_CU(cuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  std::size_t nodes = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 3u);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(read_back(b, kCount), filled(kCount, 1));
  std::vector<std::uint32_t> expected = filled(kCount, 9);
  expected[1] = 5;
  EXPECT_EQ(read_back(a, kCount), expected);
  // Again: b now gets the 9s and the 5 of the first run.
  ASSERT_CU(cuGraphLaunch(exec, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(read_back(b, kCount), expected);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_HANDLE, cuGraphLaunch(exec, s));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(graph));
  ASSERT_CU(cuStreamDestroy(s));
}

TEST_F(Graphs, AStreamThatWaitsForAnEventOfTheCaptureJoinsIt) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  ASSERT_CU(cuMemAlloc(&b, 4096));
  ASSERT_CU(cuMemsetD32(a, 0, 1024));
  ASSERT_CU(cuMemsetD32(b, 0, 1024));
  CUstream origin = nullptr, side = nullptr;
  ASSERT_CU(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUevent fork = nullptr, join = nullptr;
  ASSERT_CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuEventRecord(fork, origin));
  ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(side, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), side, b, std::uint64_t{1024}, std::uint32_t{4}));
  ASSERT_CU(cuEventRecord(join, side));
  ASSERT_CU(cuStreamWaitEvent(origin, join, 0));
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), origin, a, std::uint64_t{1024}, std::uint32_t{3}));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(origin, &graph));
  ASSERT_CU(cuStreamIsCapturing(side, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE) << "the joined stream leaves with the capture";
  EXPECT_EQ(read_back(b, 1024), filled(1024, 0));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 3));
  EXPECT_EQ(read_back(b, 1024), filled(1024, 4));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(Graphs, WhatACaptureCannotHoldIsRefusedAndSpoilsIt) {
  CUdeviceptr a = 0;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  CUstream s = nullptr, other = nullptr;
  ASSERT_CU(cuStreamCreate(&s, 0));  // blocking: the legacy stream would depend on it
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUgraph graph = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_STATE, cuStreamEndCapture(s, &graph));

  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU_EQ(CUDA_ERROR_ILLEGAL_STATE, cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
  ASSERT_CU(cuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE) << "asking about the legacy stream spoils nothing";
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamSynchronize(s));
  ASSERT_CU(cuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(s, &graph));
  EXPECT_EQ(graph, nullptr);

  // Work on the legacy stream while a blocking stream captures: refused, and the capture is spoiled.
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuMemsetD32Async(a, 1, 1, CU_STREAM_LEGACY));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(s, &graph));

  // Ended by a stream that joined it rather than began it.
  CUevent fork = nullptr;
  ASSERT_CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(cuEventRecord(fork, s));
  ASSERT_CU(cuStreamWaitEvent(other, fork, 0));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cuStreamEndCapture(other, &graph));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(s, &graph));

  // A synchronous copy on the capturing stream's side, and a wait for uncaptured work.
  CUevent outside = nullptr;
  ASSERT_CU(cuEventCreate(&outside, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(outside, other));
  ASSERT_CU(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cuStreamWaitEvent(other, outside, 0));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(other, &graph));
  ASSERT_CU(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
  std::uint32_t word = 0;
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemcpyDtoHAsync(&word, a, 4, other));
  EXPECT_CU_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(other, &graph));
  // Nothing of the spoiled captures ran, and the streams work as before.
  ASSERT_CU(cuMemsetD32Async(a, 2, 1, CU_STREAM_LEGACY));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(read_back(a, 1), filled(1, 2));
  ASSERT_CU(cuStreamDestroy(s));
  ASSERT_CU(cuStreamDestroy(other));
}

TEST_F(Graphs, NodesAddedByHandUpdatedAndClonedRunWhatTheyWereLastGiven) {
  CUfunction fill = kernel("uvmpool_fill_u32");
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  ASSERT_CU(cuMemAlloc(&b, 4096));
  ASSERT_CU(cuMemsetD32(a, 0, 1024));
  ASSERT_CU(cuMemsetD32(b, 0, 1024));
  std::uint64_t count = 1024;
  std::uint32_t value = 6;
  CUdeviceptr target = a;
  void* params[] = {&target, &count, &value};
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUgraphNode node = nullptr;
  CUDA_KERNEL_NODE_PARAMS p = fill_node(fill, params);
  ASSERT_CU(cuGraphAddKernelNode(&node, graph, nullptr, 0, &p));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  // The arguments were copied: changing them after adding changes nothing.
  value = 99;
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 6));

  // The executable graph's node, set to fill b.
  target = b;
  value = 7;
  ASSERT_CU(cuGraphExecKernelNodeSetParams(exec, node, &p));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(b, 1024), filled(1024, 7));
  EXPECT_EQ(read_back(a, 1024), filled(1024, 6));

  // The graph's node, set to 8 on a: the executable graph keeps its own until updated.
  target = a;
  value = 8;
  ASSERT_CU(cuGraphKernelNodeSetParams(node, &p));
  ASSERT_CU(cuMemsetD32(b, 0, 1024));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(b, 1024), filled(1024, 7));
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, graph, &info));
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 8));

  // A clone and a child graph node run the same work; a graph of another shape cannot update.
  CUgraph clone = nullptr, parent = nullptr;
  ASSERT_CU(cuGraphClone(&clone, graph));
  ASSERT_CU(cuGraphCreate(&parent, 0));
  CUgraphNode child = nullptr;
  ASSERT_CU(cuGraphAddChildGraphNode(&child, parent, nullptr, 0, clone));
  CUgraphNode second = nullptr;
  target = b;
  value = 11;
  ASSERT_CU(cuGraphAddKernelNode(&second, parent, &child, 1, &p));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphAddKernelNode(&second, parent, &node, 1, &p))
      << "a dependency of another graph";
  EXPECT_CU_EQ(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate(exec, parent, &info));
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CUgraphExec parent_exec = nullptr;
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  ASSERT_CU(cuGraphInstantiateWithParams(&parent_exec, parent, &ip));
  EXPECT_EQ(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
  ASSERT_CU(cuMemsetD32(a, 0, 1024));
  ASSERT_CU(cuGraphLaunch(parent_exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 8));
  EXPECT_EQ(read_back(b, 1024), filled(1024, 11));

  ASSERT_CU(cuGraphExecDestroy(parent_exec));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(parent));
  ASSERT_CU(cuGraphDestroy(clone));
  ASSERT_CU(cuGraphDestroy(graph));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphKernelNodeSetParams(node, &p)) << "its graph is gone";
}

// Memcpy and memset nodes, the CUDA 11 kernel node calls and the generic cuGraphAddNode: each node
// runs what it was last given, in the graph or in the executable graph, and a node's type is kept: a
// set call of another type, or a type the simulator does not model, is refused.
TEST_F(Graphs, MemcpyMemsetAndGenericNodesRunWhatTheyWereLastGiven) {
  CUfunction fill = kernel("uvmpool_fill_u32");
  CUdeviceptr a = 0, b = 0, c = 0;
  for (CUdeviceptr* p : {&a, &b, &c}) {
    ASSERT_CU(cuMemAlloc(p, 4096));
    ASSERT_CU(cuMemsetD32(*p, 0, 1024));
  }
  std::uint64_t count = 1024;
  std::uint32_t value = 3;
  CUdeviceptr target = a;
  void* params[] = {&target, &count, &value};
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  // a = 3 (CUDA 11's kernel node), b = a (a memcpy node), then c's first half = 5 (a memset node).
  const CUDA_KERNEL_NODE_PARAMS p = fill_node(fill, params);
  CUDA_KERNEL_NODE_PARAMS_v1 p1{};
  std::memcpy(&p1, &p, sizeof p1);  // the CUDA 12 fields begin with CUDA 11's
  // CUDA 11's calls, as its runtime gets them.
  using AddKernelNode =
      CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS_v1*);
  using ExecKernelNodeSet = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
  void* add_v1 = nullptr;
  void* exec_set_v1 = nullptr;
  constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
  ASSERT_CU(cuGetProcAddress("cuGraphAddKernelNode", &add_v1, 11000, kDefault, nullptr));
  ASSERT_CU(cuGetProcAddress("cuGraphExecKernelNodeSetParams", &exec_set_v1, 11000, kDefault, nullptr));
  CUgraphNode k = nullptr, m = nullptr, s = nullptr;
  ASSERT_CU(reinterpret_cast<AddKernelNode>(add_v1)(&k, graph, nullptr, 0, &p1));
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = a;
  copy.dstDevice = b;
  copy.WidthInBytes = 4096;
  copy.Height = copy.Depth = 1;
  CUcontext ctx = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&ctx));
  ASSERT_CU(cuGraphAddMemcpyNode(&m, graph, &k, 1, &copy, ctx));
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = c;
  set.value = 5;
  set.elementSize = 4;
  set.width = 512;
  set.height = 1;
  ASSERT_CU(cuGraphAddMemsetNode(&s, graph, &m, 1, &set, ctx));
  set.elementSize = 3;
  CUgraphNode refused = nullptr;
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemsetNode(&refused, graph, nullptr, 0, &set, ctx));
  set.elementSize = 4;
  // Generic nodes: c's second half = 7 (a kernel), then an empty node.
  CUdeviceptr half = c + 2048;
  std::uint64_t half_count = 512;
  std::uint32_t seven = 7;
  void* half_params[] = {&half, &half_count, &seven};
  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_KERNEL;
  std::memcpy(&g.kernel, &p, sizeof p);
  g.kernel.kernelParams = half_params;
  CUgraphNode gk = nullptr, empty = nullptr;
  ASSERT_CU(cuGraphAddNode(&gk, graph, &s, nullptr, 1, &g));
  CUgraphNodeParams e{};
  e.type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphAddNode(&empty, graph, &gk, nullptr, 1, &e));
  CUgraphNodeParams semaphore{};  // a type the simulator does not model
  semaphore.type = CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL;
  EXPECT_CU_EQ(CUDA_ERROR_NOT_SUPPORTED, cuGraphAddNode(&refused, graph, nullptr, nullptr, 0, &semaphore));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 3));
  EXPECT_EQ(read_back(b, 1024), filled(1024, 3));
  std::vector<std::uint32_t> halves = filled(1024, 5);
  std::fill(halves.begin() + 512, halves.end(), 7u);
  EXPECT_EQ(read_back(c, 1024), halves);

  // The executable graph's memcpy node copies into c instead, its memset node sets b to 6 (generic).
  copy.dstDevice = c;
  ASSERT_CU(cuGraphExecMemcpyNodeSetParams(exec, m, &copy, ctx));
  CUgraphNodeParams gs{};
  gs.type = CU_GRAPH_NODE_TYPE_MEMSET;
  gs.memset = {b, 0, 6, 4, 1024, 1, ctx};
  ASSERT_CU(cuGraphExecNodeSetParams(exec, s, &gs));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphExecNodeSetParams(exec, m, &gs)) << "a memcpy node set as a memset";
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphExecMemsetNodeSetParams(exec, k, &set, ctx)) << "a kernel node";
  value = 4;
  ASSERT_CU(reinterpret_cast<ExecKernelNodeSet>(exec_set_v1)(exec, k, &p1));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(a, 1024), filled(1024, 4));
  EXPECT_EQ(read_back(b, 1024), filled(1024, 6));
  halves = filled(1024, 4);
  std::fill(halves.begin() + 512, halves.end(), 7u);
  EXPECT_EQ(read_back(c, 1024), halves) << "the memcpy, then the generic kernel over its second half";

  // The graph's own nodes set (typed and generic), then the executable graph updated from it.
  set.value = 9;
  ASSERT_CU(cuGraphMemsetNodeSetParams(s, &set));
  copy.dstDevice = b;
  ASSERT_CU(cuGraphMemcpyNodeSetParams(m, &copy));
  seven = 8;
  ASSERT_CU(cuGraphNodeSetParams(gk, &g));
  EXPECT_CU_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphNodeSetParams(empty, &g)) << "an empty node set as a kernel";
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, graph, &info));
  ASSERT_CU(cuGraphLaunch(exec, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(read_back(b, 1024), filled(1024, 3)) << "a copied again, filled with the graph's own 3";
  halves = filled(1024, 9);
  std::fill(halves.begin() + 512, halves.end(), 8u);
  EXPECT_EQ(read_back(c, 1024), halves);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(Graphs, ACaptureIntoTheProgramsGraphAppendsToIt) {
  CUdeviceptr a = 0;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  ASSERT_CU(cuMemsetD32(a, 0, 1024));
  CUgraph graph = nullptr;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCaptureToGraph(s, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUgraph into = nullptr;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamGetCaptureInfo(s, &status, nullptr, &into, nullptr, nullptr, nullptr));
  EXPECT_EQ(into, graph);
  ASSERT_CU(launch(kernel("uvmpool_fill_u32"), s, a, std::uint64_t{1024}, std::uint32_t{12}));
  CUgraph ended = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &ended));
  EXPECT_EQ(ended, graph);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(read_back(a, 1024), filled(1024, 12));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuStreamDestroy(s));
}

}  // namespace
}  // namespace simtest
