// Graphs: built by stream capture (timeline.h records what a capturing stream is given) or node by
// node, instantiated, launched, and updated. Nodes added by hand: kernel (both parameter versions),
// memcpy, memset, memory-operation and child-graph nodes, and through cuGraphAddNode kernel, memcpy,
// memset, memory-operation, host, child-graph and empty nodes; other types (events, semaphores, memory
// allocation, conditionals) are CUDA_ERROR_NOT_SUPPORTED here. A node's parameters are checked as its
// stream call's would be (copy_work.h makes a copy's or memset's work without running it).
//
// A graph is its nodes in the order they were captured or added, each node the work it runs (a child
// graph node: the child's work, copied when added, as the driver clones the child). Dependencies are
// not kept: a launch submits every node's work on the launch's stream, in that order, as one piece
// (timeline::submit_all), which is one valid order of any graph built so. An executable graph is a
// copy of the nodes' work, made at instantiation, so a later change of the graph does not reach it;
// cuGraphExecKernelNodeSetParams and cuGraphExecUpdate change it. Handles stay valid until destroyed;
// a stale or foreign one is CUDA_ERROR_INVALID_VALUE or INVALID_HANDLE, never a crash.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "driver/kernel_node_params.h"
#include "sim/contexts.h"
#include "sim/copy_work.h"
#include "sim/entry_points.h"
#include "sim/launch.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

struct Graph;

struct Node {
  Graph* graph;
  CUgraphNodeType type;
  std::vector<WorkSpec> work;
};

struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
};

struct Exec {
  std::vector<std::vector<WorkSpec>> work;   // per node, in order
  std::vector<CUgraphNodeType> types;        // per node
  std::map<const Node*, std::size_t> index;  // the nodes of the graphs it was made or updated from
};

// Every live graph, node and executable graph, and the captures that append to a graph the program
// gave (cuStreamBeginCaptureToGraph). Guarded by mutex.
struct Registry {
  std::mutex mutex;
  std::map<const void*, std::unique_ptr<Graph>> graphs;
  std::map<const void*, Node*> nodes;
  std::map<const void*, std::unique_ptr<Exec>> execs;
  std::map<CUstream, Graph*> capture_targets;  // by the capturing stream, until its capture ends
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed: calls may come during exit
  return *instance;
}

Graph* find_graph(Registry& r, CUgraph g) {
  auto it = r.graphs.find(g);
  return it == r.graphs.end() ? nullptr : it->second.get();
}

Exec* find_exec(Registry& r, CUgraphExec e) {
  auto it = r.execs.find(e);
  return it == r.execs.end() ? nullptr : it->second.get();
}

Node* add_node(Registry& r, Graph& g, CUgraphNodeType type, std::vector<WorkSpec> work) {
  g.nodes.push_back(std::make_unique<Node>(Node{&g, type, std::move(work)}));
  Node* n = g.nodes.back().get();
  r.nodes.emplace(n, n);
  return n;
}

CUgraph add_graph(Registry& r) {
  auto g = std::make_unique<Graph>();
  Graph* raw = g.get();
  r.graphs.emplace(raw, std::move(g));
  return reinterpret_cast<CUgraph>(raw);
}

// A node's dependencies must be nodes of the same graph (their order is the order of adding).
bool valid_dependencies(Registry& r, const Graph& g, const CUgraphNode* deps, std::size_t n) {
  if (n != 0 && deps == nullptr) return false;
  for (std::size_t i = 0; i < n; ++i) {
    auto it = r.nodes.find(deps[i]);
    if (it == r.nodes.end() || it->second->graph != &g) return false;
  }
  return true;
}

// The work of a kernel node's parameters, in the current context (or the one named for a CUkernel).
CUresult kernel_node_work(const CUDA_KERNEL_NODE_PARAMS* p, WorkSpec* out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  CUfunction f = p->func;
  if (f == nullptr) {
    f = reinterpret_cast<CUfunction>(p->kern);
    if (p->ctx != nullptr) context = reinterpret_cast<Context*>(p->ctx);
  }
  if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const KernelLaunch launch{f, {p->gridDimX, p->gridDimY, p->gridDimZ}, {p->blockDimX, p->blockDimY, p->blockDimZ},
                            p->sharedMemBytes, p->kernelParams, p->extra};
  return kernel_work(launch, context, out);
}

// A node's work, made by the typed calls and by the generic ones alike.
CUresult kernel_node(const CUDA_KERNEL_NODE_PARAMS* p, std::vector<WorkSpec>* out) {
  WorkSpec work;
  if (CUresult status = kernel_node_work(p, &work); status != CUDA_SUCCESS) return status;
  out->push_back(std::move(work));
  return CUDA_SUCCESS;
}
CUresult known_context(CUcontext ctx) {
  return ctx == nullptr || from_handle(ctx) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult memcpy_node(const CUDA_MEMCPY3D* c, CUcontext ctx, std::vector<WorkSpec>* out) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = known_context(ctx); status != CUDA_SUCCESS) return status;
  return copy_3d(c, Submission{nullptr, false, out}, "memcpy node");
}
CUresult memset_node(CUdeviceptr dst, std::size_t pitch, unsigned value, unsigned element, std::size_t width,
                     std::size_t height, CUcontext ctx, std::vector<WorkSpec>* out) {
  if (element != 1 && element != 2 && element != 4) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = known_context(ctx); status != CUDA_SUCCESS) return status;
  return fill_rows(dst, pitch, value, element, width, height, Submission{nullptr, false, out}, "memset node");
}
CUresult memset_node(const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx, std::vector<WorkSpec>* out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return memset_node(p->dst, p->pitch, p->value, p->elementSize, p->width, p->height, ctx, out);
}
CUresult mem_op_node(CUcontext ctx, unsigned count, const CUstreamBatchMemOpParams* ops, unsigned flags,
                     std::vector<WorkSpec>* out) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = known_context(ctx); status != CUDA_SUCCESS) return status;
  return mem_op_work(count, ops, out);
}
CUresult mem_op_node(const CUDA_BATCH_MEM_OP_NODE_PARAMS* p, std::vector<WorkSpec>* out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return mem_op_node(p->ctx, p->count, p->paramArray, p->flags, out);
}
CUresult host_node(CUhostFn fn, void* data, std::vector<WorkSpec>* out) {
  WorkSpec work;
  if (CUresult status = host_work(fn, data, "host node", &work); status != CUDA_SUCCESS) return status;
  out->push_back(std::move(work));
  return CUDA_SUCCESS;
}

// The work of a generic node's parameters (cuGraphAddNode, cuGraphNodeSetParams,
// cuGraphExecNodeSetParams), but for a child graph's, which the caller takes from the registry.
CUresult generic_node(const CUgraphNodeParams* p, std::vector<WorkSpec>* out) {
  if (p == nullptr || p->reserved0[0] != 0 || p->reserved0[1] != 0 || p->reserved0[2] != 0 || p->reserved2 != 0)
    return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS k = driver::kernel_node_params(p->kernel);
      return kernel_node(&k, out);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
      return memcpy_node(&p->memcpy.copyParams, p->memcpy.copyCtx, out);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return memset_node(p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize, p->memset.width,
                         p->memset.height, p->memset.ctx, out);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      return mem_op_node(p->memOp.ctx, p->memOp.count, p->memOp.paramArray, p->memOp.flags, out);
    case CU_GRAPH_NODE_TYPE_HOST: return host_node(p->host.fn, p->host.userData, out);
    case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: return CUDA_ERROR_INVALID_VALUE;  // the caller's
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// A node of `type` doing `work` added to `graph` after `deps`.
CUresult add_typed(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, std::size_t num_deps,
                   CUgraphNodeType type, std::vector<WorkSpec> work) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, graph);
  if (g == nullptr || !valid_dependencies(r, *g, deps, num_deps)) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraphNode>(add_node(r, *g, type, std::move(work)));
  return CUDA_SUCCESS;
}

// A node of the graph, or of an executable graph, given new work of its own type.
CUresult set_typed(CUgraphNode node, CUgraphNodeType type, std::vector<WorkSpec> work) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.nodes.find(node);
  if (it == r.nodes.end() || it->second->type != type) return CUDA_ERROR_INVALID_VALUE;
  it->second->work = std::move(work);
  return CUDA_SUCCESS;
}
CUresult exec_set_typed(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type, std::vector<WorkSpec> work) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Exec* e = find_exec(r, exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = e->index.find(reinterpret_cast<const Node*>(node));
  if (it == e->index.end() || e->types[it->second] != type) return CUDA_ERROR_INVALID_VALUE;
  e->work[it->second] = std::move(work);
  return CUDA_SUCCESS;
}

CUresult instantiate(CUgraphExec* out, CUgraph graph) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto e = std::make_unique<Exec>();
  for (const auto& n : g->nodes) {
    e->index.emplace(n.get(), e->work.size());
    e->work.push_back(n->work);
    e->types.push_back(n->type);
  }
  *out = reinterpret_cast<CUgraphExec>(e.get());
  r.execs.emplace(e.get(), std::move(e));
  return CUDA_SUCCESS;
}

CUresult launch(CUgraphExec exec, CUstream stream, bool per_thread) {
  std::vector<WorkSpec> work;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const Exec* e = find_exec(r, exec);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    for (const std::vector<WorkSpec>& node : e->work) work.insert(work.end(), node.begin(), node.end());
  }
  return timeline::submit_all(stream, per_thread, std::move(work));
}

CUresult begin_capture(CUstream stream, bool per_thread, CUstreamCaptureMode mode, CUgraph into) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);  // held across: the capture and its target are known together
  Graph* g = nullptr;
  if (into != nullptr && (g = find_graph(r, into)) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = timeline::begin_capture(stream, per_thread, mode); status != CUDA_SUCCESS) return status;
  if (g != nullptr) r.capture_targets[stream] = g;
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream stream, bool per_thread, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<WorkSpec> work;
  const CUresult status = timeline::end_capture(stream, per_thread, &work, nullptr);
  Graph* target = nullptr;
  if (status != CUDA_ERROR_ILLEGAL_STATE && status != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
    auto it = r.capture_targets.find(stream);
    if (it != r.capture_targets.end()) {
      target = r.graphs.count(it->second) != 0 ? it->second : nullptr;  // destroyed meanwhile: none
      r.capture_targets.erase(it);
    }
  }
  if (status != CUDA_SUCCESS) return status;
  CUgraph graph = target != nullptr ? reinterpret_cast<CUgraph>(target) : add_graph(r);
  Graph& g = *find_graph(r, graph);
  for (WorkSpec& w : work) {
    const CUgraphNodeType type = w.kind == WorkKind::Copy     ? CU_GRAPH_NODE_TYPE_MEMCPY
                                 : w.kind == WorkKind::Memset ? CU_GRAPH_NODE_TYPE_MEMSET
                                 : w.kind == WorkKind::Kernel ? CU_GRAPH_NODE_TYPE_KERNEL
                                 : w.kind == WorkKind::HostFunc ? CU_GRAPH_NODE_TYPE_HOST
                                                                : CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    add_node(r, g, type, std::vector<WorkSpec>{std::move(w)});
  }
  *out = graph;
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream stream, bool per_thread, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, size_t* num_deps) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t capture_id = 0;
  if (CUresult r = timeline::capture_info(stream, per_thread, status, &capture_id); r != CUDA_SUCCESS) return r;
  if (id != nullptr) *id = capture_id;
  // The graph under construction is made at the end here: only a capture into the program's graph names one.
  if (graph != nullptr) {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.capture_targets.find(stream);
    *graph = *status != CU_STREAM_CAPTURE_STATUS_NONE && it != r.capture_targets.end()
                 ? reinterpret_cast<CUgraph>(it->second) : nullptr;
  }
  if (deps != nullptr) *deps = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return CUDA_SUCCESS;
}

constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

}  // namespace

CUresult impl::cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return timeline::exchange_capture_mode(mode);
}

CUresult impl::cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return begin_capture(s, kLegacy, mode, nullptr);
}
CUresult impl::cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return begin_capture(s, kPerThread, mode, nullptr);
}
// Dependencies on the graph's nodes are not kept (the capture appends after every node).
CUresult impl::cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode*, const CUgraphEdgeData*,
                                           size_t, CUstreamCaptureMode mode) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(s, kLegacy, mode, g);
}
CUresult impl::cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode*, const CUgraphEdgeData*,
                                                size_t, CUstreamCaptureMode mode) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(s, kPerThread, mode, g);
}
CUresult impl::cuStreamEndCapture(CUstream s, CUgraph* g) { return end_capture(s, kLegacy, g); }
CUresult impl::cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return end_capture(s, kPerThread, g); }
CUresult impl::cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                         const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) {
  if (edges != nullptr) *edges = nullptr;
  return capture_info(s, kLegacy, status, id, graph, deps, n);
}
CUresult impl::cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                              CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                                              size_t* n) {
  if (edges != nullptr) *edges = nullptr;
  return capture_info(s, kPerThread, status, id, graph, deps, n);
}

CUresult impl::cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  *out = add_graph(r);
  return CUDA_SUCCESS;
}

CUresult impl::cuGraphDestroy(CUgraph graph) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.graphs.find(graph);
  if (it == r.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& n : it->second->nodes) r.nodes.erase(n.get());
  // Executable graphs keep their work; their index must not name a node that may be reused.
  for (auto& [h, e] : r.execs)
    std::erase_if(e->index, [&](const auto& entry) { return entry.first->graph == it->second.get(); });
  std::erase_if(r.capture_targets, [&](const auto& t) { return t.second == it->second.get(); });
  r.graphs.erase(it);
  return CUDA_SUCCESS;
}

CUresult impl::cuGraphClone(CUgraph* out, CUgraph original) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, original);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraph clone = add_graph(r);
  Graph& c = *find_graph(r, clone);
  for (const auto& n : g->nodes) add_node(r, c, n->type, n->work);
  *out = clone;
  return CUDA_SUCCESS;
}

// With nodes null: their count. Otherwise up to *count of them, the rest null, and *count the number.
CUresult impl::cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr)
    for (std::size_t i = 0; i < *count; ++i)
      nodes[i] = i < g->nodes.size() ? reinterpret_cast<CUgraphNode>(g->nodes[i].get()) : nullptr;
  *count = g->nodes.size();
  return CUDA_SUCCESS;
}

CUresult impl::cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                       const CUDA_KERNEL_NODE_PARAMS* params) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  if (CUresult status = kernel_node(params, &work); status != CUDA_SUCCESS) return status;
  return add_typed(out, graph, deps, num_deps, CU_GRAPH_NODE_TYPE_KERNEL, std::move(work));
}
CUresult impl::cuGraphAddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                    const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS p = driver::kernel_node_params(*params);
  return impl::cuGraphAddKernelNode_v2(out, graph, deps, num_deps, &p);
}

CUresult impl::cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = kernel_node(params, &work); status != CUDA_SUCCESS) return status;
  return set_typed(node, CU_GRAPH_NODE_TYPE_KERNEL, std::move(work));
}
CUresult impl::cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS p = driver::kernel_node_params(*params);
  return impl::cuGraphKernelNodeSetParams_v2(node, &p);
}

CUresult impl::cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                    const CUDA_MEMCPY3D* params, CUcontext ctx) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  if (CUresult status = memcpy_node(params, ctx, &work); status != CUDA_SUCCESS) return status;
  return add_typed(out, graph, deps, num_deps, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(work));
}
CUresult impl::cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = memcpy_node(params, nullptr, &work); status != CUDA_SUCCESS) return status;
  return set_typed(node, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(work));
}

CUresult impl::cuGraphAddMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                    const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  if (CUresult status = memset_node(params, ctx, &work); status != CUDA_SUCCESS) return status;
  return add_typed(out, graph, deps, num_deps, CU_GRAPH_NODE_TYPE_MEMSET, std::move(work));
}
CUresult impl::cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = memset_node(params, nullptr, &work); status != CUDA_SUCCESS) return status;
  return set_typed(node, CU_GRAPH_NODE_TYPE_MEMSET, std::move(work));
}

CUresult impl::cuGraphAddBatchMemOpNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                        const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  if (CUresult status = mem_op_node(params, &work); status != CUDA_SUCCESS) return status;
  return add_typed(out, graph, deps, num_deps, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(work));
}
CUresult impl::cuGraphBatchMemOpNodeSetParams(CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = mem_op_node(params, &work); status != CUDA_SUCCESS) return status;
  return set_typed(node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(work));
}

// A child graph node's parameters name the child, whose work is copied in as cuGraphAddChildGraphNode does.
CUresult impl::cuGraphAddNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData*,
                                 size_t num_deps, CUgraphNodeParams* params) {
  if (out == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->type == CU_GRAPH_NODE_TYPE_GRAPH)
    return impl::cuGraphAddChildGraphNode(out, graph, deps, num_deps, params->graph.graph);
  std::vector<WorkSpec> work;
  if (CUresult status = generic_node(params, &work); status != CUDA_SUCCESS) return status;
  return add_typed(out, graph, deps, num_deps, params->type, std::move(work));
}
CUresult impl::cuGraphAddNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                              CUgraphNodeParams* params) {
  return impl::cuGraphAddNode_v2(out, graph, deps, nullptr, num_deps, params);
}
CUresult impl::cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  std::vector<WorkSpec> work;
  if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult status = generic_node(params, &work); status != CUDA_SUCCESS) return status;
  return set_typed(node, params->type, std::move(work));
}

CUresult impl::cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num_deps,
                                        CUgraph child) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, graph);
  Graph* c = find_graph(r, child);
  if (g == nullptr || c == nullptr || g == c || !valid_dependencies(r, *g, deps, num_deps)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<WorkSpec> work;
  for (const auto& n : c->nodes) work.insert(work.end(), n->work.begin(), n->work.end());
  *out = reinterpret_cast<CUgraphNode>(add_node(r, *g, CU_GRAPH_NODE_TYPE_GRAPH, std::move(work)));
  return CUDA_SUCCESS;
}

// CUDA 11's form: no error node and an empty log on success (the simulator's instantiation does not fail
// but for an unknown graph).
CUresult impl::cuGraphInstantiate_v2(CUgraphExec* out, CUgraph graph, CUgraphNode* error_node, char* log,
                                     size_t log_bytes) {
  const CUresult status = instantiate(out, graph);
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_bytes != 0) log[0] = '\0';
  return status;
}

// Flags are accepted and change nothing here (auto-free, upload, device launch, priority).
CUresult impl::cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long) {
  return instantiate(out, graph);
}
CUresult impl::cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult status = instantiate(out, graph);
  params->hErrNode_out = nullptr;
  params->result_out = status == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return status;
}
CUresult impl::cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph graph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return impl::cuGraphInstantiateWithParams(out, graph, params);
}

CUresult impl::cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                 const CUDA_KERNEL_NODE_PARAMS* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = kernel_node(params, &work); status != CUDA_SUCCESS) return status;
  return exec_set_typed(exec, node, CU_GRAPH_NODE_TYPE_KERNEL, std::move(work));
}
CUresult impl::cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                              const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS p = driver::kernel_node_params(*params);
  return impl::cuGraphExecKernelNodeSetParams_v2(exec, node, &p);
}
CUresult impl::cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* params,
                                              CUcontext ctx) {
  std::vector<WorkSpec> work;
  if (CUresult status = memcpy_node(params, ctx, &work); status != CUDA_SUCCESS) return status;
  return exec_set_typed(exec, node, CU_GRAPH_NODE_TYPE_MEMCPY, std::move(work));
}
CUresult impl::cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                              const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  std::vector<WorkSpec> work;
  if (CUresult status = memset_node(params, ctx, &work); status != CUDA_SUCCESS) return status;
  return exec_set_typed(exec, node, CU_GRAPH_NODE_TYPE_MEMSET, std::move(work));
}
CUresult impl::cuGraphExecBatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  std::vector<WorkSpec> work;
  if (CUresult status = mem_op_node(params, &work); status != CUDA_SUCCESS) return status;
  return exec_set_typed(exec, node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, std::move(work));
}
CUresult impl::cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  std::vector<WorkSpec> work;
  if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult status = generic_node(params, &work); status != CUDA_SUCCESS) return status;
  return exec_set_typed(exec, node, params->type, std::move(work));
}

// The graph must have the executable graph's shape: as many nodes, each of the same type (a child
// graph's with as much work of the same kinds). Otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the
// reason, and nothing changes.
CUresult impl::cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = {};
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Exec* e = find_exec(r, exec);
  Graph* g = find_graph(r, graph);
  if (e == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool same = g->nodes.size() == e->work.size();
  for (std::size_t i = 0; same && i < g->nodes.size(); ++i) {
    // Nodes of the same types; a child graph's work of the same kinds (its own nodes' types).
    const std::vector<WorkSpec>& now = e->work[i];
    const std::vector<WorkSpec>& next = g->nodes[i]->work;
    const auto same_kind = [](const WorkSpec& a, const WorkSpec& b) { return a.kind == b.kind; };
    same = g->nodes[i]->type == e->types[i] &&
           (e->types[i] != CU_GRAPH_NODE_TYPE_GRAPH ||
            (now.size() == next.size() && std::equal(now.begin(), now.end(), next.begin(), same_kind)));
  }
  if (!same) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (std::size_t i = 0; i < g->nodes.size(); ++i) {
    e->work[i] = g->nodes[i]->work;
    e->types[i] = g->nodes[i]->type;
    e->index[g->nodes[i].get()] = i;
  }
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult impl::cuGraphExecDestroy(CUgraphExec exec) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.execs.erase(exec) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult impl::cuGraphLaunch(CUgraphExec exec, CUstream s) { return launch(exec, s, kLegacy); }
CUresult impl::cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return launch(exec, s, kPerThread); }

}  // namespace uvmpool::sim
