// Graphs: built by stream capture (timeline.h records what a capturing stream is given) or node by
// node (kernel and child-graph nodes), instantiated, launched, and updated.
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

#include "sim/contexts.h"
#include "sim/entry_points.h"
#include "sim/launch.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

struct Graph;

struct Node {
  Graph* graph;
  std::vector<WorkSpec> work;
};

struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
};

struct Exec {
  std::vector<std::vector<WorkSpec>> work;   // per node, in order
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

Node* add_node(Registry& r, Graph& g, std::vector<WorkSpec> work) {
  g.nodes.push_back(std::make_unique<Node>(Node{&g, std::move(work)}));
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
  for (WorkSpec& w : work) add_node(r, g, std::vector<WorkSpec>{std::move(w)});
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
  for (const auto& n : g->nodes) add_node(r, c, n->work);
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
  WorkSpec work;
  if (CUresult status = kernel_node_work(params, &work); status != CUDA_SUCCESS) return status;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Graph* g = find_graph(r, graph);
  if (g == nullptr || !valid_dependencies(r, *g, deps, num_deps)) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraphNode>(add_node(r, *g, std::vector<WorkSpec>{std::move(work)}));
  return CUDA_SUCCESS;
}

CUresult impl::cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  WorkSpec work;
  if (CUresult status = kernel_node_work(params, &work); status != CUDA_SUCCESS) return status;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.nodes.find(node);
  if (it == r.nodes.end() || it->second->work.size() != 1 || it->second->work[0].kind != WorkKind::Kernel)
    return CUDA_ERROR_INVALID_VALUE;
  it->second->work[0] = std::move(work);
  return CUDA_SUCCESS;
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
  *out = reinterpret_cast<CUgraphNode>(add_node(r, *g, std::move(work)));
  return CUDA_SUCCESS;
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
  WorkSpec work;
  if (CUresult status = kernel_node_work(params, &work); status != CUDA_SUCCESS) return status;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Exec* e = find_exec(r, exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = e->index.find(reinterpret_cast<const Node*>(node));
  if (it == e->index.end() || e->work[it->second].size() != 1 || e->work[it->second][0].kind != WorkKind::Kernel)
    return CUDA_ERROR_INVALID_VALUE;
  e->work[it->second][0] = std::move(work);
  return CUDA_SUCCESS;
}

// The graph must have the executable graph's shape: as many nodes, each with as much work of the same
// kinds. Otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the reason, and nothing changes.
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
    const std::vector<WorkSpec>& now = e->work[i];
    const std::vector<WorkSpec>& next = g->nodes[i]->work;
    same = now.size() == next.size() &&
           std::equal(now.begin(), now.end(), next.begin(), [](const WorkSpec& a, const WorkSpec& b) { return a.kind == b.kind; });
  }
  if (!same) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (std::size_t i = 0; i < g->nodes.size(); ++i) {
    e->work[i] = g->nodes[i]->work;
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
