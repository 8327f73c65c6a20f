// What graph launches show tiering (src/tiering/graph_touches.h), on the simulated driver's real
// captures and graphs: work captured on a stream touches nothing until its graph is launched, and
// then the launch touches its union, looked up at the launch (a buffer moved since shows its new
// tier); node updates grow the union; a graph built by calls not followed, or holding a launch that
// could not be read, is an unread launch; a graph launched during an overlapped copy is ordered behind the move
// it touched; replays between moves keep every byte. Each test takes the steps
// src/hooks/graph_hooks.cpp takes around each call, against this test's own pool and tiering.
#include <gtest/gtest.h>

#include <vector>

#include "tiering_test.h"  // first: the driver's declarations come before cuda.h's
#include "tiering/tiering.h"
#include "tiering/transfer_ranges.h"

namespace {

using namespace pooltest;
using uvmpool::pool::Tier;
using uvmpool::tiering::GraphTouches;
using uvmpool::tiering::LaunchSeen;
using uvmpool::tiering::LaunchTouches;
using uvmpool::tiering::Mode;
using uvmpool::tiering::Tiering;
using uvmpool::tiering::Touch;
using uvmpool::tiering::Transfer;
using uvmpool::tiering::TransferRange;

class GraphTouches_ : public TieringTest {
 protected:
  void SetUp() override {
    TieringTest::SetUp();
    if (HasFatalFailure()) return;
    pool->stop_background();
    fill_kernel = kernel("uvmpool_fill_u32");
    CUcontext context = nullptr;
    ASSERT_CU(drv().cuCtxGetCurrent(&context));
    streams.created(stream, context, true);  // as the cuStreamCreate hook lists it
  }
  void TearDown() override {
    tiering.reset();
    streams.destroying(stream);
    TieringTest::TearDown();
  }
  void make_tiering(Mode mode = Mode::Auto, uvmpool::tiering::MoverConfig config = {}) {
    config.thread = false;
    tiering = std::make_unique<Tiering>(drv(), *pool, mode, streams, config);
    tiering->set_observer(&GraphTouches_::observe, this);
  }
  static void observe(void* self, CUfunction, CUstream, const LaunchTouches&) {
    ++static_cast<GraphTouches_*>(self)->kernels_seen;
  }

  // The hooks' steps around cuStreamBeginCapture and cuStreamEndCapture.
  void begin_capture() {
    ASSERT_CU(drv().cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    graphs().capture_began();
  }
  CUgraph end_capture() {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    EXPECT_CU(drv().cuStreamGetCaptureInfo_v3(stream, &status, &id, nullptr, nullptr, nullptr, nullptr));
    CUgraph graph = nullptr;
    EXPECT_CU(drv().cuStreamEndCapture(stream, &graph));
    graphs().capture_ended(id, graph, {});
    return graph;
  }
  CUgraphExec instantiate(CUgraph graph) {
    CUgraphExec exec = nullptr;
    EXPECT_CU(drv().cuGraphInstantiateWithFlags(&exec, graph, 0));
    graphs().instantiated(graph, exec);
    return exec;
  }
  // A fill of `bytes` at `p` with `value` on the stream, shown to tiering as the launch hooks do.
  CUresult fill_on_stream(CUdeviceptr p, std::size_t bytes, std::uint32_t value) {
    std::uint64_t count = bytes / 4;
    void* params[] = {&p, &count, &value};
    LaunchSeen seen;
    tiering->before_launch(fill_kernel, stream, params, nullptr, &seen);
    const CUresult r = drv().cuLaunchKernel(fill_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
    tiering->after_launch(seen, stream);
    return r;
  }
  // Tiering in remote mode (only the moves asked here) with overlapped copies: once a copy is taken,
  // the program launches *exec through the hooks' steps, writing memory whose copy is already taken;
  // the launch must be read.
  void make_tiering_launching_during_copies(const CUgraphExec* exec) {
    uvmpool::tiering::MoverConfig config;
    config.overlap = true;
    config.after_copy = [this, exec] {
      ASSERT_TRUE(tiering->mover().copying());
      CUresult r = CUDA_ERROR_UNKNOWN;
      const LaunchSeen seen = launch_graph(*exec, &r);
      ASSERT_CU(r);
      EXPECT_EQ(seen.read, LaunchSeen::Read::Read);
    };
    make_tiering(Mode::Remote, config);
  }
  // With make_tiering_launching_during_copies: promotes the 2 MiB at `in_host` in one epoch, during whose
  // copy the graph launch writes `value` there; the launch must be ordered behind the commit, its bytes kept.
  void expect_launch_ordered_behind_promotion(CUdeviceptr in_host, std::uint32_t value) {
    ASSERT_TRUE(tiering->mover().request(in_host, 2 * kMiB, Tier::Device));
    ASSERT_CU(tiering->mover().run_epoch());
    ASSERT_CU(drv().cuStreamSynchronize(stream));
    EXPECT_EQ(tier_at(in_host), 'D') << "the move was not committed";
    EXPECT_EQ(tiering->stats().launches_ordered, 1u) << "the graph launch was not ordered behind the move";
    EXPECT_TRUE(all_equal(in_host, 2 * kMiB, value)) << "the graph's write was lost";
  }
  // A kernel node filling the 2 MiB at `target` with `value`, added to `graph` first and recorded as
  // graph_node_hooks.cpp records it.
  void add_fill_node(CUgraph graph, CUdeviceptr target, std::uint32_t value, CUgraphNode* node) {
    std::uint64_t count = 2 * kMiB / 4;
    void* params[] = {&target, &count, &value};  // the driver copies them when the node is added
    CUDA_KERNEL_NODE_PARAMS k{};
    k.func = fill_kernel;
    k.gridDimX = k.gridDimY = k.gridDimZ = k.blockDimY = k.blockDimZ = 1;
    k.blockDimX = 32;
    k.kernelParams = params;
    ASSERT_CU(drv().cuGraphAddKernelNode_v2(node, graph, nullptr, 0, &k));
    std::vector<GraphTouches::Range> ranges;
    ASSERT_TRUE(tiering->node_ranges(k, &ranges));
    graphs().add_node(graph, *node, &ranges);
  }
  // A graph launch as the cuGraphLaunch hook makes it; what it showed.
  LaunchSeen launch_graph(CUgraphExec exec, CUresult* r) {
    LaunchSeen seen;
    tiering->before_graph_launch(exec, stream, &seen);
    tiering->order_behind_moves(seen, stream);  // as the hook does, inside the submission gate
    *r = drv().cuGraphLaunch(exec, stream);
    tiering->after_launch(seen, stream);
    return seen;
  }
  // A spilled 2 MiB chunk (`*in_host`) and device room to promote it.
  void spill_with_room(CUdeviceptr* in_host) {
    const CUdeviceptr room = allocate(8 * kMiB);
    const CUdeviceptr spilled = allocate(kBudget);
    ASSERT_NE(spilled, 0u);
    *in_host = spilled + kBudget - 2 * kMiB;
    ASSERT_EQ(tier_at(*in_host), 'H');
    must_free(*pool, room);
    allocated.erase(allocated.begin());
    pool->release_idle();
  }
  static const Touch* find(const LaunchTouches& t, CUdeviceptr p) {
    for (std::size_t i = 0; i < t.count; ++i)
      if (t.touches[i].address == p) return &t.touches[i];
    return nullptr;
  }
  static GraphTouches& graphs() { return GraphTouches::process(); }

  uvmpool::tiering::StreamRegistry streams;
  std::unique_ptr<Tiering> tiering;
  CUfunction fill_kernel = nullptr;
  int kernels_seen = 0;
};

TEST_F(GraphTouches_, CapturedWorkTouchesNothingUntilItsGraphIsLaunchedThenItsUnionAtTheLaunch) {
  make_tiering();
  // Captured while nothing lies in host memory: recorded all the same, since the graph may run later.
  const CUdeviceptr a = allocate(4 * kMiB), b = allocate(4 * kMiB);
  ASSERT_EQ(tier_at(a), 'D');
  begin_capture();
  ASSERT_CU(fill_on_stream(a, 4 * kMiB, 5));
  const TransferRange memset_range{b, 4 * kMiB};
  LaunchSeen seen;
  tiering->before_transfer(Transfer::Memset, stream, {&memset_range, 1}, &seen);
  ASSERT_CU(drv().cuMemsetD32Async(b, 6, kMiB, stream));
  tiering->after_launch(seen, stream);
  EXPECT_EQ(seen.read, LaunchSeen::Read::Skipped) << "a captured memset touches nothing now";
  const CUgraph graph = end_capture();
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(kernels_seen, 0) << "a captured launch was shown as a touch";
  auto s = tiering->stats();
  EXPECT_EQ(s.captured, 2u);
  EXPECT_EQ(s.launches_read, 0u);
  EXPECT_EQ(s.transfers_read, 0u);
  const CUgraphExec exec = instantiate(graph);

  // Spill, and demote a: the launch finds a in host memory now, b on the device.
  const CUdeviceptr spilled = allocate(kBudget);
  ASSERT_NE(spilled, 0u);
  ASSERT_TRUE(tiering->mover().request(a, 4 * kMiB, Tier::Host));
  ASSERT_CU(tiering->mover().run_epoch());
  ASSERT_EQ(tiers(a, 4 * kMiB, 2 * kMiB), "HH");
  CUresult r = CUDA_ERROR_UNKNOWN;
  const LaunchSeen launched = launch_graph(exec, &r);
  ASSERT_CU(r);
  ASSERT_EQ(launched.read, LaunchSeen::Read::Read);
  ASSERT_EQ(launched.touches.count, 2u);
  const Touch* ta = find(launched.touches, a);
  const Touch* tb = find(launched.touches, b);
  ASSERT_NE(ta, nullptr);
  ASSERT_NE(tb, nullptr);
  EXPECT_TRUE(ta->host);
  EXPECT_FALSE(tb->host);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(a, 4 * kMiB, 5));
  EXPECT_TRUE(all_equal(b, 4 * kMiB, 6));
  s = tiering->stats();
  EXPECT_EQ(s.graph_launches_read, 1u);
  EXPECT_EQ(s.launches_in_place, 1u);
  EXPECT_EQ(tiering->policy_stats().launches, 1u) << "the policy is shown the graph launch as one launch";
  ASSERT_CU(drv().cuGraphExecDestroy(exec));
  graphs().exec_destroyed(exec);
  ASSERT_CU(drv().cuGraphDestroy(graph));
  graphs().graph_destroyed(graph);
}

TEST_F(GraphTouches_, NodeUpdatesGrowTheUnionAndGraphsNotFollowedAreUnread) {
  make_tiering();
  const CUdeviceptr a = allocate(2 * kMiB), b = allocate(2 * kMiB);
  const CUdeviceptr spilled = allocate(kBudget);
  ASSERT_NE(spilled, 0u);
  const CUdeviceptr in_host = spilled + kBudget - 2 * kMiB;
  ASSERT_EQ(tier_at(in_host), 'H');
  // A graph built by hand, as the cuGraphAddKernelNode hook follows it.
  CUdeviceptr target = a;
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&target, &count, &value};
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = fill_kernel;
  p.gridDimX = p.gridDimY = p.gridDimZ = p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = params;
  CUgraph graph = nullptr;
  ASSERT_CU(drv().cuGraphCreate(&graph, 0));
  CUgraphNode node = nullptr;
  ASSERT_CU(drv().cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &p));
  std::vector<GraphTouches::Range> ranges;
  ASSERT_TRUE(tiering->node_ranges(p, &ranges));
  ASSERT_EQ(ranges.size(), 1u);
  graphs().add_node(graph, node, &ranges);
  const CUgraphExec exec = instantiate(graph);
  CUresult r = CUDA_ERROR_UNKNOWN;
  LaunchSeen seen = launch_graph(exec, &r);
  ASSERT_CU(r);
  ASSERT_EQ(seen.touches.count, 1u);
  EXPECT_EQ(seen.touches.touches[0].address, a);

  // The executable graph's node now fills in_host: it touches both (the old pointer is not told apart).
  target = in_host;
  ASSERT_CU(drv().cuGraphExecKernelNodeSetParams_v2(exec, node, &p));
  ASSERT_TRUE(tiering->node_ranges(p, &ranges));
  graphs().add_exec(exec, &ranges);
  seen = launch_graph(exec, &r);
  ASSERT_CU(r);
  ASSERT_EQ(seen.touches.count, 2u);
  ASSERT_NE(find(seen.touches, in_host), nullptr);
  EXPECT_TRUE(find(seen.touches, in_host)->host);
  EXPECT_EQ(seen.touches.host, 1u);

  // The graph's own node set to b, then the executable graph updated from it: b joins.
  target = b;
  ASSERT_CU(drv().cuGraphKernelNodeSetParams_v2(node, &p));
  ASSERT_TRUE(tiering->node_ranges(p, &ranges));
  graphs().set_node(node, &ranges);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(drv().cuGraphExecUpdate_v2(exec, graph, &info));
  graphs().updated(exec, graph);
  seen = launch_graph(exec, &r);
  ASSERT_CU(r);
  EXPECT_EQ(seen.touches.count, 3u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(b, 64, 1));

  // A graph no hook saw built: its launch is unread, as is one holding a launch that could not be read.
  CUgraph unknown = nullptr;
  ASSERT_CU(drv().cuGraphCreate(&unknown, 0));
  CUgraphExec unknown_exec = nullptr;
  ASSERT_CU(drv().cuGraphInstantiateWithFlags(&unknown_exec, unknown, 0));
  EXPECT_EQ(launch_graph(unknown_exec, &r).read, LaunchSeen::Read::Unread);
  CUgraph opaque = nullptr;
  ASSERT_CU(drv().cuGraphClone(&opaque, graph));
  graphs().cloned(graph, opaque, {});
  graphs().add_node(opaque, nullptr, nullptr);  // a node whose arguments could not be read
  const CUgraphExec opaque_exec = instantiate(opaque);
  EXPECT_EQ(launch_graph(opaque_exec, &r).read, LaunchSeen::Read::Unread);
  ASSERT_CU(r);
  const auto s = tiering->stats();
  EXPECT_EQ(s.graph_launches_read, 3u);
  EXPECT_EQ(s.graph_launches_unread, 2u);
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  for (CUgraphExec e : {exec, unknown_exec, opaque_exec}) ASSERT_CU(drv().cuGraphExecDestroy(e));
  for (CUgraph g : {graph, unknown, opaque}) ASSERT_CU(drv().cuGraphDestroy(g));
}

// The generic node calls (cuGraphAddNode and its set calls) are read by the node's type, as the typed
// calls are: a memcpy node names both sides' ranges in pool memory, a memset node its rows; host,
// empty, event and graph-memory nodes name nothing and leave the graph readable; memory operations,
// conditionals and types this build does not know make it unreadable (a child graph is the hook's).
TEST_F(GraphTouches_, GenericNodesAreReadByTheirType) {
  make_tiering();
  const CUdeviceptr a = allocate(2 * kMiB), b = allocate(2 * kMiB);
  std::vector<GraphTouches::Range> ranges;
  CUgraphNodeParams n{};
  n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  CUDA_MEMCPY3D& c = n.memcpy.copyParams;
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = a;
  c.dstDevice = b + 4096;
  c.WidthInBytes = 8192;
  c.Height = c.Depth = 1;
  ASSERT_TRUE(tiering->node_ranges(n, &ranges));
  EXPECT_EQ(ranges, (std::vector<GraphTouches::Range>{{b + 4096, 8192}, {a, 8192}})) << "destination, then source";
  c.srcMemoryType = CU_MEMORYTYPE_HOST;  // a host side is never pool memory
  static char host[8192];
  c.srcHost = host;
  ASSERT_TRUE(tiering->node_ranges(n, &ranges));
  EXPECT_EQ(ranges.size(), 1u);

  n = {};
  n.type = CU_GRAPH_NODE_TYPE_MEMSET;
  n.memset = {a + 256, 1024, 0, 4, 16, 3, nullptr};  // three rows of 64 bytes, 1 KiB apart
  ASSERT_TRUE(tiering->node_ranges(n, &ranges));
  EXPECT_EQ(ranges, (std::vector<GraphTouches::Range>{{a + 256, 2 * 1024 + 64}}));

  n = {};
  n.type = CU_GRAPH_NODE_TYPE_KERNEL;
  CUdeviceptr target = b;
  std::uint64_t count = 16;
  std::uint32_t value = 1;
  void* params[] = {&target, &count, &value};
  n.kernel.func = fill_kernel;
  n.kernel.kernelParams = params;
  ASSERT_TRUE(tiering->node_ranges(n, &ranges));
  EXPECT_EQ(ranges, (std::vector<GraphTouches::Range>{{b, 1}}));

  for (const CUgraphNodeType none : {CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                                     CU_GRAPH_NODE_TYPE_EVENT_RECORD, CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                                     CU_GRAPH_NODE_TYPE_MEM_FREE}) {
    n = {};
    n.type = none;
    EXPECT_TRUE(tiering->node_ranges(n, &ranges)) << "type " << none;
    EXPECT_TRUE(ranges.empty()) << "type " << none;
  }
  // 15: a type newer than this build (within the enum's range of values: UBSan checks a load of one).
  n = {};
  n.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;  // the words its waits and writes reach, pool memory's only
  CUstreamBatchMemOpParams ops[3] = {};
  ops[0].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_64, b + 64, {1}, 0, 0};
  ops[1].memoryBarrier = {CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_SYS};
  ops[2].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_32, 4096, {1}, 0, 0};  // not pool memory
  n.memOp = {nullptr, 3, ops, 0};
  ASSERT_TRUE(tiering->node_ranges(n, &ranges));
  EXPECT_EQ(ranges, (std::vector<GraphTouches::Range>{{b + 64, 8}}));

  for (const int unreadable : {int(CU_GRAPH_NODE_TYPE_CONDITIONAL), int(CU_GRAPH_NODE_TYPE_GRAPH), 15}) {
    n = {};
    n.type = static_cast<CUgraphNodeType>(unreadable);
    EXPECT_FALSE(tiering->node_ranges(n, &ranges)) << "type " << unreadable;
  }
  EXPECT_EQ(Tiering::node_read(CU_GRAPH_NODE_TYPE_CONDITIONAL), Tiering::NodeRead::Unreadable);
  EXPECT_EQ(Tiering::node_read(CU_GRAPH_NODE_TYPE_GRAPH), Tiering::NodeRead::Child);
}

// A conditional node's bodies (XLA's WHILE command) are graphs the driver makes when the node is added
// and the program fills afterwards: the graph's union takes theirs, nested ones too, when it is
// instantiated or updated; an unreadable body makes it unreadable; the bodies go with their graph.
TEST_F(GraphTouches_, AConditionalNodesBodiesJoinItsGraphsUnionWhenInstantiated) {
  GraphTouches& g = graphs();
  const auto handle = [](std::uintptr_t v) { return reinterpret_cast<CUgraph>(v); };  // no driver needed
  const CUgraph parent = handle(0xC0DE0), body = handle(0xC0DE1), nested = handle(0xC0DE2), other = handle(0xC0DE3);
  const auto node = [](std::uintptr_t v) { return reinterpret_cast<CUgraphNode>(v); };
  const auto exec = [](std::uintptr_t v) { return reinterpret_cast<CUgraphExec>(v); };
  const std::vector<GraphTouches::Range> a{{0x1000, 1}}, b{{0x2000, 64}}, c{{0x3000, 1}};
  g.add_node(parent, node(0xC1), &a);
  const CUgraph bodies[] = {body};
  g.add_conditional(parent, node(0xC2), bodies);
  g.add_node(body, node(0xC3), &b);  // filled after the conditional node was added
  const CUgraph inner[] = {nested};
  g.add_conditional(body, node(0xC4), inner);
  g.add_node(nested, node(0xC5), &c);
  g.instantiated(parent, exec(0xE1));
  std::vector<GraphTouches::Range> ranges;
  ASSERT_TRUE(g.launch_ranges(exec(0xE1), &ranges));
  EXPECT_EQ(ranges, (std::vector<GraphTouches::Range>{{0x1000, 1}, {0x2000, 64}, {0x3000, 1}}));
  // A node the body gains later reaches an update, not the executable graph made before.
  g.add_node(body, node(0xC6), &c);
  g.add_node(nested, node(0xC7), nullptr);  // unreadable
  ASSERT_TRUE(g.launch_ranges(exec(0xE1), &ranges));
  g.updated(exec(0xE1), parent);
  EXPECT_FALSE(g.launch_ranges(exec(0xE1), &ranges)) << "a nested body is unreadable";
  // A clone takes the bodies' records as they are; a child graph node the whole graph's.
  g.cloned(parent, other, {});
  g.instantiated(other, exec(0xE2));
  EXPECT_FALSE(g.launch_ranges(exec(0xE2), &ranges));
  // Destroying the graph forgets its bodies: a graph at a body's address later starts empty.
  g.graph_destroyed(parent);
  g.add_node(body, node(0xC8), &a);
  g.instantiated(body, exec(0xE3));
  ASSERT_TRUE(g.launch_ranges(exec(0xE3), &ranges));
  EXPECT_EQ(ranges, a);
  for (const std::uintptr_t e : {0xE1, 0xE2, 0xE3}) g.exec_destroyed(exec(e));
  for (const CUgraph gone : {body, other}) g.graph_destroyed(gone);
}

// A memcpy node added by hand next to a kernel node: before its calls were followed, the graph was
// known by its kernel node alone, so a launch during an overlapped move of the copy's destination was
// not ordered behind the move, and the copy's bytes were lost with the old pieces.
TEST_F(GraphTouches_, AMemcpyNodeWritingMemoryBeingMovedIsOrderedBehindTheCommit) {
  CUdeviceptr in_host = 0;
  ASSERT_NO_FATAL_FAILURE(spill_with_room(&in_host));
  const CUdeviceptr source = allocate(2 * kMiB);
  ASSERT_EQ(tier_at(source), 'D');
  CUgraphExec exec = nullptr;
  make_tiering_launching_during_copies(&exec);
  // The graph as graph_node_hooks.cpp follows it: source = 0x66 (a kernel node), then in_host = source.
  CUgraph graph = nullptr;
  ASSERT_CU(drv().cuGraphCreate(&graph, 0));
  CUgraphNode fill_node = nullptr, copy_node = nullptr;
  ASSERT_NO_FATAL_FAILURE(add_fill_node(graph, source, 0x66, &fill_node));
  std::vector<GraphTouches::Range> ranges;
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = source;
  copy.dstDevice = in_host;
  copy.WidthInBytes = 2 * kMiB;
  copy.Height = copy.Depth = 1;
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  ASSERT_CU(drv().cuGraphAddMemcpyNode(&copy_node, graph, &fill_node, 1, &copy, context));
  tiering->node_ranges(uvmpool::tiering::ranges_of(&copy).span(), &ranges);
  ASSERT_EQ(ranges.size(), 2u);
  graphs().add_node(graph, copy_node, &ranges);
  exec = instantiate(graph);
  expect_launch_ordered_behind_promotion(in_host, 0x66);
  ASSERT_CU(drv().cuGraphExecDestroy(exec));
  graphs().exec_destroyed(exec);
  ASSERT_CU(drv().cuGraphDestroy(graph));
  graphs().graph_destroyed(graph);
}

// A memory-operation node beside a kernel node: before cuGraphAddBatchMemOpNode was followed, the graph
// was known by its kernel node alone, and its write into memory being moved was lost with the old
// pieces (the race detector reports it) when the node's word is left out of the record.
TEST_F(GraphTouches_, AMemoryOperationNodeWritingMemoryBeingMovedIsOrderedBehindTheCommit) {
  CUdeviceptr in_host = 0;
  ASSERT_NO_FATAL_FAILURE(spill_with_room(&in_host));
  ASSERT_CU(drv().cuMemsetD32_v2(in_host, 0x55, 2 * kMiB / 4));
  const CUdeviceptr other = allocate(2 * kMiB);
  ASSERT_EQ(tier_at(other), 'D');
  CUgraphExec exec = nullptr;
  make_tiering_launching_during_copies(&exec);
  // The graph as graph_node_hooks.cpp follows it: other = 0x66 (a kernel node), then in_host's second
  // word = 0x77 (a memory-operation node).
  CUgraph graph = nullptr;
  ASSERT_CU(drv().cuGraphCreate(&graph, 0));
  CUgraphNode fill_node = nullptr, op_node = nullptr;
  ASSERT_NO_FATAL_FAILURE(add_fill_node(graph, other, 0x66, &fill_node));
  std::vector<GraphTouches::Range> ranges;
  CUstreamBatchMemOpParams op{};
  op.writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, in_host + 4, {0x77}, 0, 0};
  CUcontext context = nullptr;
  ASSERT_CU(drv().cuCtxGetCurrent(&context));
  const CUDA_BATCH_MEM_OP_NODE_PARAMS m{context, 1, &op, 0};
  ASSERT_CU(drv().cuGraphAddBatchMemOpNode(&op_node, graph, &fill_node, 1, &m));
  tiering->node_ranges(uvmpool::tiering::mem_op_ranges(&op, 1), &ranges);
  ASSERT_EQ(ranges.size(), 1u);
  graphs().add_node(graph, op_node, &ranges);
  exec = instantiate(graph);
  ASSERT_TRUE(tiering->mover().request(in_host, 2 * kMiB, Tier::Device));
  ASSERT_CU(tiering->mover().run_epoch());
  ASSERT_CU(drv().cuStreamSynchronize(stream));
  EXPECT_EQ(tier_at(in_host), 'D') << "the move was not committed";
  EXPECT_EQ(tiering->stats().launches_ordered, 1u) << "the graph launch was not ordered behind the move";
  std::uint32_t words[3] = {};
  ASSERT_CU(drv().cuMemcpyDtoH_v2(words, in_host, sizeof words));
  EXPECT_EQ(words[0], 0x55u);
  EXPECT_EQ(words[1], 0x77u) << "the node's write was lost";
  EXPECT_EQ(words[2], 0x55u);
  EXPECT_TRUE(all_equal(other, 2 * kMiB, 0x66));
  ASSERT_CU(drv().cuGraphExecDestroy(exec));
  graphs().exec_destroyed(exec);
  ASSERT_CU(drv().cuGraphDestroy(graph));
  graphs().graph_destroyed(graph);
}

TEST_F(GraphTouches_, AGraphLaunchedDuringAnOverlappedCopyIsOrderedBehindTheCommitAndItsBytesStay) {
  CUdeviceptr in_host = 0;
  ASSERT_NO_FATAL_FAILURE(spill_with_room(&in_host));
  CUgraphExec exec = nullptr;
  make_tiering_launching_during_copies(&exec);
  begin_capture();
  ASSERT_CU(fill_on_stream(in_host, 2 * kMiB, 0x77));
  const CUgraph graph = end_capture();
  exec = instantiate(graph);
  expect_launch_ordered_behind_promotion(in_host, 0x77);
  ASSERT_CU(drv().cuGraphExecDestroy(exec));
  ASSERT_CU(drv().cuGraphDestroy(graph));
}

// UVMPOOL_TIERING_EPOCHS=launch: each graph launch runs the epoch it finds queued before it returns
// (its hook shows it outside the host-wait gate, as a kernel launch's), so the next launch finds the
// memory moved; not every few launches, as kernel launches do (MoverConfig::launches_per_epoch): a
// graph is many kernels' work. Before, only kernel launches ran epochs, and a step of one graph a
// layer (tests/gpu/graph_replay.py) had its epochs run only at the step's few kernel launches.
TEST_F(GraphTouches_, WithEpochsOnTheLaunchingThreadEachGraphLaunchCarriesOutTheMovesQueued) {
  CUdeviceptr in_host = 0;
  ASSERT_NO_FATAL_FAILURE(spill_with_room(&in_host));
  for (const bool on_launch : {false, true}) {
    SCOPED_TRACE(on_launch ? "epochs on the launching thread" : "epochs on no thread");
    uvmpool::tiering::MoverConfig config;
    config.on_launch = on_launch;
    config.launches_per_epoch = 4;  // kernel launches' (UVMPOOL_TIERING_LOOKAHEAD / 8); not graphs'
    make_tiering(Mode::Auto, config);  // epochs run on launches in auto only
    begin_capture();
    ASSERT_CU(fill_on_stream(in_host, 2 * kMiB, 0x55));
    const CUgraph graph = end_capture();
    const CUgraphExec exec = instantiate(graph);
    // Two launches in a row, each after a move asked: in, then out again.
    for (const Tier to : {Tier::Device, Tier::Host}) {
      SCOPED_TRACE(to == Tier::Device ? "promoted" : "demoted");
      ASSERT_TRUE(tiering->mover().request(in_host, 2 * kMiB, to));
      CUresult r = CUDA_ERROR_UNKNOWN;
      const LaunchSeen seen = launch_graph(exec, &r);
      ASSERT_CU(r);
      EXPECT_EQ(seen.read, LaunchSeen::Read::Read);
      EXPECT_EQ(tiering->mover().queued(), !on_launch);
      const char moved = to == Tier::Device ? 'D' : 'H';
      EXPECT_EQ(tier_at(in_host), on_launch ? moved : 'H') << "after the graph launch returned";
      ASSERT_CU(drv().cuStreamSynchronize(stream));
      EXPECT_TRUE(all_equal(in_host, 2 * kMiB, 0x55)) << "the graph's write, moved with the chunk";
    }
    EXPECT_EQ(tiering->mover().stats().moves, on_launch ? 2u : 0u);
    ASSERT_CU(drv().cuGraphExecDestroy(exec));
    graphs().exec_destroyed(exec);
    ASSERT_CU(drv().cuGraphDestroy(graph));
    graphs().graph_destroyed(graph);
    tiering.reset();
  }
}

TEST_F(GraphTouches_, ReplaysBetweenMovesBothWaysKeepEveryByte) {
  // A graph that adds to three buffers (a fill, then a copy of one into another) replayed while its
  // buffers move between the tiers in epochs between and behind the replays (copies held). Remote: only
  // the moves asked here are made.
  make_tiering(Mode::Remote);
  const CUdeviceptr a = allocate(4 * kMiB), b = allocate(4 * kMiB);
  const CUdeviceptr room = allocate(8 * kMiB);
  const CUdeviceptr spilled = allocate(kBudget - 8 * kMiB);
  ASSERT_NE(spilled, 0u);
  must_free(*pool, room);
  allocated.erase(allocated.begin() + 2);
  CUfunction copy_kernel = kernel("uvmpool_copy");
  std::uint32_t round = 0;
  begin_capture();
  ASSERT_CU(fill_on_stream(a, 4 * kMiB, 0));  // replaced below by a node update each round
  {
    std::uint64_t bytes = 4 * kMiB;
    CUdeviceptr dst = b, src = a;
    void* params[] = {&dst, &src, &bytes};
    LaunchSeen seen;
    tiering->before_launch(copy_kernel, stream, params, nullptr, &seen);
    ASSERT_CU(drv().cuLaunchKernel(copy_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr));
    tiering->after_launch(seen, stream);
  }
  const CUgraph graph = end_capture();
  const CUgraphExec exec = instantiate(graph);
  std::size_t n = 2;
  CUgraphNode nodes[2] = {};
  ASSERT_CU(drv().cuGraphGetNodes(graph, nodes, &n));
  ASSERT_EQ(n, 2u);
  for (round = 1; round <= 6; ++round) {
    CUdeviceptr target = a;
    std::uint64_t count = kMiB;
    void* params[] = {&target, &count, &round};
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = fill_kernel;
    p.gridDimX = p.gridDimY = p.gridDimZ = p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    ASSERT_CU(drv().cuGraphExecKernelNodeSetParams_v2(exec, nodes[0], &p));
    const Tier to = round % 2 == 1 ? Tier::Host : Tier::Device;
    ASSERT_TRUE(tiering->mover().request(a, 4 * kMiB, to));
    ASSERT_TRUE(tiering->mover().request(b, 4 * kMiB, to));
    CUresult r = CUDA_ERROR_UNKNOWN;
    (void)launch_graph(exec, &r);  // queued before the hold: the hold waits for it
    ASSERT_CU(r);
    ASSERT_CU(tiering->mover().run_until_idle());
    ASSERT_EQ(tiers(a, 4 * kMiB, 2 * kMiB), to == Tier::Host ? "HH" : "DD") << "round " << round;
    (void)launch_graph(exec, &r);  // after the remap: on the new pieces
    ASSERT_CU(r);
    ASSERT_CU(drv().cuStreamSynchronize(stream));
    EXPECT_TRUE(all_equal(a, 4 * kMiB, round)) << "round " << round;
    EXPECT_TRUE(all_equal(b, 4 * kMiB, round)) << "round " << round;
  }
  EXPECT_EQ(tiering->stats().moves, 12u);
  ASSERT_CU(drv().cuGraphExecDestroy(exec));
  ASSERT_CU(drv().cuGraphDestroy(graph));
}

}  // namespace
