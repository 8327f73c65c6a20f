// Hooks of stream capture and graphs: what each graph touches is followed as it is captured, built
// (the nodes' hooks: graph_node_hooks.cpp), cloned, instantiated and updated
// (src/tiering/graph_touches.h), and a cuGraphLaunch is shown to tiering with the union, as one launch
// (Tiering::before_graph_launch). Each call is forwarded
// unchanged; what it made is noted only when the driver answered CUDA_SUCCESS. A capture begins only
// outside the mover's holds (it passes the host-wait gate): a hold placed on a capturing stream would
// be recorded into the graph, and the mover checks for captures only before it holds. Handed out only
// while tiering watches launches (hands_out), but for the capture's begin and end, which the pool
// needs whatever tiering does: its wait before unmapping freed memory would spoil a capture
// (src/pool/captures.h).
#include <algorithm>
#include <vector>

#include "driver/real_driver.h"
#include "hooks/hooks.h"
#include "hooks/shown.h"
#include "pool/pool.h"
#include "stats/counters.h"
#include "tiering/graph_touches.h"
#include "tiering/streams.h"
#include "tiering/tiering.h"

namespace uvmpool::hooks::impl {
namespace {

using tiering::GraphTouches;

const driver::Table* real_table() {
  const driver::RealDriver* d = driver::real();
  return d != nullptr ? &d->table : nullptr;
}

GraphTouches& graphs() { return GraphTouches::process(); }

// A per-thread variant's stream 0 is the calling thread's default stream.
CUstream per_thread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

// A graph's nodes (for node updates that name them later); none when the driver will not say.
std::vector<CUgraphNode> nodes_of(const driver::Table& d, CUgraph graph) {
  std::size_t n = 0;
  if (graph == nullptr || d.cuGraphGetNodes == nullptr || d.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS)
    return {};
  std::vector<CUgraphNode> nodes(n);
  if (d.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return {};
  nodes.resize(std::min(n, nodes.size()));
  return nodes;
}

// Before a capture of `stream` begins: the pool waits for what was freed so far, which it could not
// wait for during the capture, and counts it under way from here (src/pool/captures.h).
void capture_beginning(CUstream stream) {
  if (pool::Pool* p = pool::Pool::existing()) p->capture_beginning(stream);
}

CUresult begin(CUresult began, CUstream stream) {
  if (pool::Pool* p = pool::Pool::existing()) p->capture_begun(stream, began);
  if (began == CUDA_SUCCESS && watches_launches()) graphs().capture_began();
  return began;
}

CUresult end(const driver::Table& d, CUresult ended, CUstream stream, std::uint64_t id, CUgraph* graph) {
  if (pool::Pool* p = pool::Pool::existing()) p->capture_ended(stream);
  if (!watches_launches()) return ended;
  // UNMATCHED: not the stream that began it (the capture goes on); ILLEGAL_STATE: none under way.
  if (id == 0 || ended == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED || ended == CUDA_ERROR_ILLEGAL_STATE) return ended;
  // Any other refusal may leave it going on too (a null graph pointer, the wrong thread): then it has
  // not ended, and its later launches must still be recorded. A capture the driver ended for good
  // (spoiled: INVALIDATED) no longer answers to its id.
  if (ended != CUDA_SUCCESS && GraphTouches::capture_id(d, stream, false) == id) return ended;
  const CUgraph made = ended == CUDA_SUCCESS && graph != nullptr ? *graph : nullptr;
  const std::vector<CUgraphNode> nodes = nodes_of(d, made);
  graphs().capture_ended(id, made, nodes);
  return ended;
}

tiering::HostWaitGate& gate() { return tiering::StreamRegistry::process().host_waits(); }

}  // namespace

#define UVMPOOL_DRIVER_OR_NO_DEVICE(symbol)                               \
  const driver::Table* d = real_table();                                  \
  if (d == nullptr || d->symbol == nullptr) return CUDA_ERROR_NO_DEVICE

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  stats::count_hook(driver::Fn::cuStreamBeginCapture_v2);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamBeginCapture_v2);
  capture_beginning(s);
  const tiering::HostWaitGate::Pass pass(gate());
  return begin(d->cuStreamBeginCapture_v2(s, mode), s);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  stats::count_hook(driver::Fn::cuStreamBeginCapture_v2_ptsz);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamBeginCapture_v2_ptsz);
  capture_beginning(per_thread(s));
  const tiering::HostWaitGate::Pass pass(gate());
  return begin(d->cuStreamBeginCapture_v2_ptsz(s, mode), per_thread(s));
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps,
                                             const CUgraphEdgeData* data, size_t n, CUstreamCaptureMode mode) {
  stats::count_hook(driver::Fn::cuStreamBeginCaptureToGraph);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamBeginCaptureToGraph);
  capture_beginning(s);
  const tiering::HostWaitGate::Pass pass(gate());
  return begin(d->cuStreamBeginCaptureToGraph(s, g, deps, data, n, mode), s);
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                  const CUgraphEdgeData* data, size_t n, CUstreamCaptureMode mode) {
  stats::count_hook(driver::Fn::cuStreamBeginCaptureToGraph_ptsz);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamBeginCaptureToGraph_ptsz);
  capture_beginning(per_thread(s));
  const tiering::HostWaitGate::Pass pass(gate());
  return begin(d->cuStreamBeginCaptureToGraph_ptsz(s, g, deps, data, n, mode), per_thread(s));
}

CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* g) {
  stats::count_hook(driver::Fn::cuStreamEndCapture);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamEndCapture);
  const std::uint64_t id = watches_launches() ? GraphTouches::capture_id(*d, s, false) : 0;  // spoiled ones end too
  return end(*d, d->cuStreamEndCapture(s, g), s, id, g);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  stats::count_hook(driver::Fn::cuStreamEndCapture_ptsz);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuStreamEndCapture_ptsz);
  const std::uint64_t id = watches_launches() ? GraphTouches::capture_id(*d, per_thread(s), false) : 0;
  return end(*d, d->cuStreamEndCapture_ptsz(s, g), per_thread(s), id, g);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  stats::count_hook(driver::Fn::cuGraphDestroy);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphDestroy);
  const CUresult r = d->cuGraphDestroy(g);
  if (r == CUDA_SUCCESS) graphs().graph_destroyed(g);
  return r;
}

CUresult CUDAAPI cuGraphClone(CUgraph* clone, CUgraph original) {
  stats::count_hook(driver::Fn::cuGraphClone);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphClone);
  const CUresult r = d->cuGraphClone(clone, original);
  if (r == CUDA_SUCCESS) graphs().cloned(original, *clone, nodes_of(*d, *clone));
  return r;
}

CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                          CUgraph child) {
  stats::count_hook(driver::Fn::cuGraphAddChildGraphNode);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphAddChildGraphNode);
  const CUresult r = d->cuGraphAddChildGraphNode(node, g, deps, n, child);
  if (r == CUDA_SUCCESS) graphs().add_child(g, *node, child);
  return r;
}

// CUDA 11's instantiation, which cuGetProcAddress still answers the name "cuGraphInstantiate" with.
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph g, CUgraphNode* error_node, char* log,
                                       size_t log_bytes) {
  stats::count_hook(driver::Fn::cuGraphInstantiate_v2);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphInstantiate_v2);
  const CUresult r = d->cuGraphInstantiate_v2(exec, g, error_node, log, log_bytes);
  if (r == CUDA_SUCCESS) graphs().instantiated(g, *exec);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph g, unsigned long long flags) {
  stats::count_hook(driver::Fn::cuGraphInstantiateWithFlags);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphInstantiateWithFlags);
  const CUresult r = d->cuGraphInstantiateWithFlags(exec, g, flags);
  if (r == CUDA_SUCCESS) graphs().instantiated(g, *exec);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  stats::count_hook(driver::Fn::cuGraphInstantiateWithParams);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphInstantiateWithParams);
  const CUresult r = d->cuGraphInstantiateWithParams(exec, g, params);
  if (r == CUDA_SUCCESS) graphs().instantiated(g, *exec);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  stats::count_hook(driver::Fn::cuGraphInstantiateWithParams_ptsz);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphInstantiateWithParams_ptsz);
  const CUresult r = d->cuGraphInstantiateWithParams_ptsz(exec, g, params);
  if (r == CUDA_SUCCESS) graphs().instantiated(g, *exec);
  return r;
}

CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  stats::count_hook(driver::Fn::cuGraphExecUpdate_v2);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecUpdate_v2);
  const CUresult r = d->cuGraphExecUpdate_v2(exec, g, info);
  if (r == CUDA_SUCCESS) graphs().updated(exec, g);
  return r;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  stats::count_hook(driver::Fn::cuGraphExecDestroy);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphExecDestroy);
  const CUresult r = d->cuGraphExecDestroy(exec);
  if (r == CUDA_SUCCESS) graphs().exec_destroyed(exec);
  return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s) {
  stats::count_hook(driver::Fn::cuGraphLaunch);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphLaunch);
  const Shown shown(exec, s);
  return d->cuGraphLaunch(exec, s);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  stats::count_hook(driver::Fn::cuGraphLaunch_ptsz);
  UVMPOOL_DRIVER_OR_NO_DEVICE(cuGraphLaunch_ptsz);
  const Shown shown(exec, per_thread(s));
  return d->cuGraphLaunch_ptsz(exec, s);
}

#undef UVMPOOL_DRIVER_OR_NO_DEVICE

}  // namespace uvmpool::hooks::impl
