// What the nodes of a graph built by hand name of pool memory (Tiering::node_ranges, tiering.h), for
// graph_touches.h: the hooks of cuGraphAdd*Node, cuGraph*NodeSetParams and cuGraphExec*NodeSetParams
// (src/hooks/graph_node_hooks.cpp) record it for the graph, and a cuGraphLaunch shows the union.
// A node left out here would be missing from a union that is otherwise read, so an overlapped move
// could run under it unordered: what cannot be read (a node type newer than this build) makes the
// graph unreadable instead (its launches then order behind every move). Child graph and conditional
// nodes name graphs, whose records graph_touches.h joins.
#include "tiering/tiering.h"

#include "driver/kernel_node_params.h"
#include "tiering/launch_args.h"
#include "tiering/transfer_ranges.h"

namespace uvmpool::tiering {

bool Tiering::node_ranges(const CUDA_KERNEL_NODE_PARAMS& node, std::vector<GraphTouches::Range>* out) {
  out->clear();
  const CUfunction f = node.func != nullptr ? node.func : reinterpret_cast<CUfunction>(node.kern);
  if (f == nullptr) return false;
  const ParamLayout* layout = layouts_.kept(f);
  if (layout == nullptr) {  // asking may load the function: outside any hold (before_launch)
    HostWaitGate::Pass pass(streams_.host_waits(), mode_ == Mode::Auto);
    layout = layouts_.find(f);
  }
  return for_each_word(*layout, node.kernelParams, node.extra, [&](std::uint64_t word) {
    if (pool_.probe(static_cast<CUdeviceptr>(word)).owner != 0) out->emplace_back(word, 1);
  });
}

void Tiering::node_ranges(std::span<const TransferRange> ranges, std::vector<GraphTouches::Range>* out) const {
  out->clear();
  for (const TransferRange& r : ranges)
    if (r.bytes != 0 && pool_.probe(r.address).owner != 0) out->emplace_back(r.address, r.bytes);
}

Tiering::NodeRead Tiering::node_read(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return NodeRead::Kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY: return NodeRead::Memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET: return NodeRead::Memset;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return NodeRead::MemOp;
    case CU_GRAPH_NODE_TYPE_GRAPH: return NodeRead::Child;
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:  // the graph's own memory, not the pool's
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return NodeRead::NamesNone;
    default: return NodeRead::Unreadable;  // newer types; conditionals (the hook's)
  }
}

bool Tiering::node_ranges(const CUgraphNodeParams& node, std::vector<GraphTouches::Range>* out) {
  out->clear();
  switch (node_read(node.type)) {
    case NodeRead::Kernel: return node_ranges(driver::kernel_node_params(node.kernel), out);
    case NodeRead::Memcpy: node_ranges(ranges_of(&node.memcpy.copyParams).span(), out); return true;
    case NodeRead::Memset: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = node.memset;
      node_ranges(pitched_range(m.dst, m.pitch, m.width, m.elementSize, m.height).span(), out);
      return true;
    }
    case NodeRead::MemOp: node_ranges(mem_op_ranges(node.memOp.paramArray, node.memOp.count), out); return true;
    case NodeRead::NamesNone: return true;
    case NodeRead::Child:  // the caller's
    case NodeRead::Unreadable: return false;
  }
  return false;
}

}  // namespace uvmpool::tiering
