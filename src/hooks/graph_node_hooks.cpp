// Hooks of the calls that build and change a graph node by node: what each node names of pool memory
// goes to its graph's record (src/tiering/graph_touches.h), so that a cuGraphLaunch shows the union.
// Every node call that can name device memory is followed, in both parameter versions where the
// driver has two (CUDA 11's kernel nodes, CUDA 12's), and the generic ones (cuGraphAddNode and its
// set calls) by the node's type (Tiering::node_read): a node left out would be missing from a union
// otherwise read, and an overlapped move could run under it unordered; a type that cannot be read
// (one newer than this build) makes the graph unreadable, whose launches order behind every move; a
// conditional node's bodies join the graph's union when it is instantiated (graph_touches.h). A
// memory-operation node names the words its waits and writes reach (tiering/transfer_ranges.h). Each
// call is forwarded unchanged; what it made is noted only when the driver answered CUDA_SUCCESS. Not
// followed: the host, event, semaphore and graph memory node calls, none of which names pool memory.
#include <vector>

#include "driver/kernel_node_params.h"
#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "stats/counters.h"
#include "tiering/graph_touches.h"
#include "tiering/tiering.h"
#include "tiering/transfer_ranges.h"

namespace uvmpool::hooks::impl {
namespace {

using tiering::GraphTouches;
using tiering::Tiering;
using Ranges = std::vector<GraphTouches::Range>;

const driver::Table* real_table() {
  const driver::RealDriver* d = driver::real();
  return d != nullptr ? &d->table : nullptr;
}

GraphTouches& graphs() { return GraphTouches::process(); }

// What a node names, as graph_touches.h takes it: null when unreadable. With no tiering yet (no pool)
// nothing can be pool memory, but an unreadable type stays unreadable.
const Ranges* kernel_ranges(const CUDA_KERNEL_NODE_PARAMS* params, Ranges* out) {
  out->clear();
  Tiering* t = Tiering::process();
  if (t == nullptr || params == nullptr) return out;
  return t->node_ranges(*params, out) ? out : nullptr;
}
const Ranges* kernel_ranges(const CUDA_KERNEL_NODE_PARAMS_v1* params, Ranges* out) {
  if (params == nullptr) return kernel_ranges(static_cast<const CUDA_KERNEL_NODE_PARAMS*>(nullptr), out);
  const CUDA_KERNEL_NODE_PARAMS p = driver::kernel_node_params(*params);
  return kernel_ranges(&p, out);
}
const Ranges* transfer_ranges(const tiering::TransferRanges& ranges, Ranges* out) {
  out->clear();
  if (Tiering* t = Tiering::process()) t->node_ranges(ranges.span(), out);
  return out;
}
const Ranges* memcpy_ranges(const CUDA_MEMCPY3D* copy, Ranges* out) {
  return transfer_ranges(tiering::ranges_of(copy), out);
}
const Ranges* memset_ranges(const CUDA_MEMSET_NODE_PARAMS* m, Ranges* out) {
  if (m == nullptr) return transfer_ranges({}, out);
  return transfer_ranges(tiering::pitched_range(m->dst, m->pitch, m->width, m->elementSize, m->height), out);
}
const Ranges* mem_op_ranges(const CUDA_BATCH_MEM_OP_NODE_PARAMS* m, Ranges* out) {
  out->clear();
  if (Tiering* t = Tiering::process(); t != nullptr && m != nullptr)
    t->node_ranges(tiering::mem_op_ranges(m->paramArray, m->count), out);
  return out;
}
// A generic node but a child graph's (the caller's).
const Ranges* generic_ranges(const CUgraphNodeParams* params, Ranges* out) {
  out->clear();
  if (params == nullptr) return out;
  Tiering* t = Tiering::process();
  if (t == nullptr) return Tiering::node_read(params->type) == Tiering::NodeRead::Unreadable ? nullptr : out;
  return t->node_ranges(*params, out) ? out : nullptr;
}
bool is_child(const CUgraphNodeParams* params) {
  return params != nullptr && params->type == CU_GRAPH_NODE_TYPE_GRAPH;
}

// A node added to `graph`, changed in its graph, changed in an executable graph, once the driver took
// the call: only then are its parameters read (`ranges` reads them), as the driver has checked them.
template <typename Read>
CUresult added(CUresult r, CUgraph graph, const CUgraphNode* node, Read ranges) {
  if (r == CUDA_SUCCESS && node != nullptr) graphs().add_node(graph, *node, ranges());
  return r;
}
template <typename Read>
CUresult set(CUresult r, CUgraphNode node, Read ranges) {
  if (r == CUDA_SUCCESS) graphs().set_node(node, ranges());
  return r;
}
template <typename Read>
CUresult exec_set(CUresult r, CUgraphExec exec, Read ranges) {
  if (r == CUDA_SUCCESS) graphs().add_exec(exec, ranges());
  return r;
}

// A node added by cuGraphAddNode: a child graph as cuGraphAddChildGraphNode's, a conditional node with
// the bodies the driver made for it (filled later: graph_touches.h), any other by its type.
CUresult added_generic(CUresult r, CUgraph graph, const CUgraphNode* node, const CUgraphNodeParams* params,
                       Ranges* ranges) {
  if (r != CUDA_SUCCESS || node == nullptr || params == nullptr) return r;
  if (is_child(params)) {
    graphs().add_child(graph, *node, params->graph.graph);
  } else if (params->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    const CUDA_CONDITIONAL_NODE_PARAMS& c = params->conditional;
    if (c.phGraph_out != nullptr)
      graphs().add_conditional(graph, *node, {c.phGraph_out, c.size});
    else
      graphs().add_node(graph, *node, nullptr);  // bodies not told: unreadable
  } else {
    graphs().add_node(graph, *node, generic_ranges(params, ranges));
  }
  return r;
}

}  // namespace

#define UVMPOOL_DRIVER_OR_NO_DEVICE(symbol)                               \
  stats::count_hook(driver::Fn::symbol);                                  \
  const driver::Table* d = real_table();                                  \
  if (d == nullptr || d->symbol == nullptr) return CUDA_ERROR_NO_DEVICE;  \
  Ranges ranges

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddKernelNode);
  return added(d->cuGraphAddKernelNode(node, g, deps, n, params), g, node,
               [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                         const CUDA_KERNEL_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddKernelNode_v2);
  return added(d->cuGraphAddKernelNode_v2(node, g, deps, n, params), g, node,
               [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphKernelNodeSetParams);
  return set(d->cuGraphKernelNodeSetParams(node, params), node, [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphKernelNodeSetParams_v2);
  return set(d->cuGraphKernelNodeSetParams_v2(node, params), node, [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecKernelNodeSetParams);
  return exec_set(d->cuGraphExecKernelNodeSetParams(exec, node, params), exec,
                  [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_KERNEL_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecKernelNodeSetParams_v2);
  return exec_set(d->cuGraphExecKernelNodeSetParams_v2(exec, node, params), exec,
                  [&] { return kernel_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMCPY3D* params, CUcontext ctx) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddMemcpyNode);
  return added(d->cuGraphAddMemcpyNode(node, g, deps, n, params, ctx), g, node,
               [&] { return memcpy_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphMemcpyNodeSetParams);
  return set(d->cuGraphMemcpyNodeSetParams(node, params), node, [&] { return memcpy_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* params,
                                                CUcontext ctx) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecMemcpyNodeSetParams);
  return exec_set(d->cuGraphExecMemcpyNodeSetParams(exec, node, params, ctx), exec,
                  [&] { return memcpy_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddMemsetNode);
  return added(d->cuGraphAddMemsetNode(node, g, deps, n, params, ctx), g, node,
               [&] { return memset_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphMemsetNodeSetParams);
  return set(d->cuGraphMemsetNodeSetParams(node, params), node, [&] { return memset_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecMemsetNodeSetParams);
  return exec_set(d->cuGraphExecMemsetNodeSetParams(exec, node, params, ctx), exec,
                  [&] { return memset_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphAddBatchMemOpNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                          const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddBatchMemOpNode);
  return added(d->cuGraphAddBatchMemOpNode(node, g, deps, n, params), g, node,
               [&] { return mem_op_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphBatchMemOpNodeSetParams(CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphBatchMemOpNodeSetParams);
  return set(d->cuGraphBatchMemOpNodeSetParams(node, params), node, [&] { return mem_op_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecBatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_BATCH_MEM_OP_NODE_PARAMS* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecBatchMemOpNodeSetParams);
  return exec_set(d->cuGraphExecBatchMemOpNodeSetParams(exec, node, params), exec,
                  [&] { return mem_op_ranges(params, &ranges); });
}

// A child graph node added by the generic call is followed as cuGraphAddChildGraphNode's.
CUresult CUDAAPI cuGraphAddNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                CUgraphNodeParams* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddNode);
  return added_generic(d->cuGraphAddNode(node, g, deps, n, params), g, node, params, &ranges);
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* node, CUgraph g, const CUgraphNode* deps,
                                   const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddNode_v2);
  return added_generic(d->cuGraphAddNode_v2(node, g, deps, edges, n, params), g, node, params, &ranges);
}

CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphNodeSetParams);
  const CUresult r = d->cuGraphNodeSetParams(node, params);
  if (r == CUDA_SUCCESS && is_child(params)) {
    graphs().set_child(node, params->graph.graph);
    return r;
  }
  return set(r, node, [&] { return generic_ranges(params, &ranges); });
}

CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecNodeSetParams);
  const CUresult r = d->cuGraphExecNodeSetParams(exec, node, params);
  if (r == CUDA_SUCCESS && is_child(params)) {
    graphs().updated(exec, params->graph.graph);  // the child's union joins the executable graph's
    return r;
  }
  return exec_set(r, exec, [&] { return generic_ranges(params, &ranges); });
}

#undef UVMPOOL_DRIVER_OR_NO_DEVICE

}  // namespace uvmpool::hooks::impl
