#include "tiering/graph_touches.h"

namespace uvmpool::tiering {

GraphTouches& GraphTouches::process() {
  static GraphTouches* const instance = new GraphTouches;  // never destroyed: launches during exit
  return *instance;
}

std::uint64_t GraphTouches::capture_id(const driver::Table& d, CUstream stream, bool active_only) {
  if (d.cuStreamGetCaptureInfo_v3 == nullptr) return 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (d.cuStreamGetCaptureInfo_v3(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return 0;
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return 0;
  return active_only && status != CU_STREAM_CAPTURE_STATUS_ACTIVE ? 0 : id;
}

void GraphTouches::Record::add(const std::vector<Range>* r) {
  if (r == nullptr) {
    opaque = true;
    return;
  }
  ranges.insert(r->begin(), r->end());
}

void GraphTouches::Record::add(const Record& other) {
  ranges.insert(other.ranges.begin(), other.ranges.end());
  opaque = opaque || other.opaque;
}

void GraphTouches::note_nodes(CUgraph graph, std::span<const CUgraphNode> nodes) {
  for (CUgraphNode n : nodes) nodes_[n] = graph;
}

std::optional<GraphTouches::Record> GraphTouches::whole(CUgraph graph) const {
  auto it = graphs_.find(graph);
  auto b = bodies_.find(graph);
  if (it == graphs_.end() && b == bodies_.end()) return std::nullopt;
  Record out = it != graphs_.end() ? it->second : Record{};
  if (b == bodies_.end()) return out;
  // Bodies nest (a conditional node in a body); the driver makes no cycle, and a depth past any real
  // graph's is taken for one, unreadable.
  std::vector<std::pair<CUgraph, int>> todo;
  for (CUgraph body : b->second) todo.emplace_back(body, 1);
  while (!todo.empty()) {
    const auto [body, depth] = todo.back();
    todo.pop_back();
    if (depth > 64) {
      out.opaque = true;
      break;
    }
    if (auto r = graphs_.find(body); r != graphs_.end()) out.add(r->second);
    if (auto nested = bodies_.find(body); nested != bodies_.end())
      for (CUgraph inner : nested->second) todo.emplace_back(inner, depth + 1);
  }
  return out;
}

void GraphTouches::forget(CUgraph graph) {
  graphs_.erase(graph);
  std::erase_if(nodes_, [&](const auto& n) { return n.second == graph; });
  auto b = bodies_.find(graph);
  if (b == bodies_.end()) return;
  const std::vector<CUgraph> bodies = std::move(b->second);  // destroyed with the graph that owns them
  bodies_.erase(b);
  for (CUgraph body : bodies) forget(body);
}

void GraphTouches::capture_ended(std::uint64_t id, CUgraph graph, std::span<const CUgraphNode> nodes) {
  captures_.fetch_sub(1, std::memory_order_acq_rel);
  MutexLock lock(mu_);
  auto it = captures_by_id_.find(id);
  if (graph != nullptr) {
    Record& g = graphs_[graph];  // known from here on, even with nothing recorded
    if (it != captures_by_id_.end()) g.add(it->second);
    note_nodes(graph, nodes);
  }
  if (it != captures_by_id_.end()) captures_by_id_.erase(it);
}

void GraphTouches::record(std::uint64_t id, const std::vector<Range>* ranges) {
  MutexLock lock(mu_);
  captures_by_id_[id].add(ranges);
}

void GraphTouches::add_node(CUgraph graph, CUgraphNode node, const std::vector<Range>* ranges) {
  MutexLock lock(mu_);
  graphs_[graph].add(ranges);
  nodes_[node] = graph;
}

void GraphTouches::set_node(CUgraphNode node, const std::vector<Range>* ranges) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  auto g = graphs_.find(it->second);
  if (g != graphs_.end()) g->second.add(ranges);
}

void GraphTouches::add_exec(CUgraphExec exec, const std::vector<Range>* ranges) {
  MutexLock lock(mu_);
  auto it = execs_.find(exec);
  if (it != execs_.end()) it->second.add(ranges);
}

void GraphTouches::capture_launched(std::uint64_t id, CUgraphExec exec) {
  MutexLock lock(mu_);
  Record& c = captures_by_id_[id];
  auto it = execs_.find(exec);
  if (it != execs_.end())
    c.add(it->second);
  else
    c.opaque = true;
}

void GraphTouches::add_child(CUgraph graph, CUgraphNode node, CUgraph child) {
  MutexLock lock(mu_);
  const std::optional<Record> c = whole(child);
  Record& g = graphs_[graph];
  if (c)
    g.add(*c);
  else
    g.opaque = true;  // a child built by calls not followed
  nodes_[node] = graph;
}

void GraphTouches::add_conditional(CUgraph graph, CUgraphNode node, std::span<const CUgraph> bodies) {
  MutexLock lock(mu_);
  graphs_[graph];  // known from here on
  nodes_[node] = graph;
  std::vector<CUgraph>& b = bodies_[graph];
  for (CUgraph body : bodies)
    if (body != nullptr && body != graph) b.push_back(body);
}

void GraphTouches::set_child(CUgraphNode node, CUgraph child) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;  // a node of a graph built by calls not followed
  auto g = graphs_.find(it->second);
  if (g == graphs_.end()) return;
  if (const std::optional<Record> c = whole(child))
    g->second.add(*c);
  else
    g->second.opaque = true;
}

// A clone's conditional nodes have bodies of their own, which no call names to uvmpool: the clone takes
// the original's bodies' records as they are now.
void GraphTouches::cloned(CUgraph original, CUgraph clone, std::span<const CUgraphNode> nodes) {
  MutexLock lock(mu_);
  std::optional<Record> copy = whole(original);
  if (!copy) return;  // unknown stays unknown
  graphs_[clone] = std::move(*copy);
  note_nodes(clone, nodes);
}

void GraphTouches::instantiated(CUgraph graph, CUgraphExec exec) {
  MutexLock lock(mu_);
  if (std::optional<Record> copy = whole(graph)) execs_[exec] = std::move(*copy);
}

void GraphTouches::updated(CUgraphExec exec, CUgraph graph) {
  MutexLock lock(mu_);
  auto e = execs_.find(exec);
  if (e == execs_.end()) return;
  if (const std::optional<Record> g = whole(graph))
    e->second.add(*g);
  else
    e->second.opaque = true;
}

void GraphTouches::graph_destroyed(CUgraph graph) {
  MutexLock lock(mu_);
  forget(graph);
}

void GraphTouches::exec_destroyed(CUgraphExec exec) {
  MutexLock lock(mu_);
  execs_.erase(exec);
}

bool GraphTouches::launch_ranges(CUgraphExec exec, std::vector<Range>* out) const {
  out->clear();
  MutexLock lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end() || it->second.opaque) return false;
  out->assign(it->second.ranges.begin(), it->second.ranges.end());
  return true;
}

}  // namespace uvmpool::tiering
