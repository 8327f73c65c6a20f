// What CUDA graphs touch. A cuGraphLaunch runs many kernels, copies and memsets in one call, none of
// which reaches a launch hook; so each is read when it enters a graph, and a launch of the graph
// shows tiering their union (Tiering::before_graph_launch).
//
// Entering a graph: a kernel launch, copy or memset on a capturing stream (Tiering::before_launch and
// before_transfer record it under the capture's id instead of counting it as a touch: it runs only
// when the graph does), a kernel, memcpy or memset node added or set (the typed calls and the generic
// cuGraphAddNode / cuGraphNodeSetParams: src/hooks/graph_node_hooks.cpp), a child graph node (the
// child's union), a clone. An executable graph starts as its graph's union and grows by node updates
// (cuGraphExec*NodeSetParams) and whole-graph updates (cuGraphExecUpdate): a union that only grows,
// since a replaced node's old pointers are not told apart from the others.
//
// What is recorded is each pool pointer as given (a kernel's argument word, a transfer's range),
// looked up again in the pool at each launch: a graph keeps its memory for as long as it may run.
// A conditional node's bodies are graphs of their own, filled after the node is added: a graph's
// union takes theirs when it is instantiated, updated, cloned or nested (whole()).
// A graph is "opaque" when something in it could not be read (a kernel whose parameter layout the
// driver does not give, a memory-operation node added by cuGraphAddNode); a launch of an
// opaque or unknown graph (built only by calls not followed: host, event or memory-operation nodes
// added by their own calls) is an unread launch, which the mover treats as touching everything
// (mover.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::tiering {

class GraphTouches {
 public:
  using Range = std::pair<CUdeviceptr, std::size_t>;  // address, bytes (a kernel's pointer: 1 byte)

  // The process's; never destroyed (graphs are launched during exit too).
  static GraphTouches& process();

  // Captures under way (begun and not ended): while none is, no launch asks the driver whether its
  // stream captures, and before_launch keeps its two-load fast path. A capture abandoned without
  // cuStreamEndCapture keeps every later launch asking.
  bool capturing() const { return captures_.load(std::memory_order_acquire) != 0; }
  // The id of the capture `stream` takes part in (cuStreamGetCaptureInfo), or 0: none, or the driver
  // refused the question (the legacy stream while a blocking stream captures). With `active_only`, a
  // capture already spoiled (invalidated) is none too.
  static std::uint64_t capture_id(const driver::Table& d, CUstream stream, bool active_only);
  void capture_began() { captures_.fetch_add(1, std::memory_order_acq_rel); }
  // The capture `id` ended: its record goes to `graph` (added to what the graph had, for a capture into
  // the program's own graph), or is dropped when the end failed (graph null). `nodes` are the graph's
  // nodes, for later node updates.
  void capture_ended(std::uint64_t id, CUgraph graph, std::span<const CUgraphNode> nodes);

  // Recorded into capture `id`, graph `graph`, executable graph `exec`. `ranges` null: unreadable.
  void record(std::uint64_t id, const std::vector<Range>* ranges);
  void add_node(CUgraph graph, CUgraphNode node, const std::vector<Range>* ranges);
  // A kernel node of a graph changed; unknown nodes (of a graph built by calls not followed) are ignored.
  void set_node(CUgraphNode node, const std::vector<Range>* ranges);
  void add_exec(CUgraphExec exec, const std::vector<Range>* ranges);
  // A capture launching a graph, a child graph node, a clone: `to` gets what `from` has.
  void capture_launched(std::uint64_t id, CUgraphExec exec);
  void add_child(CUgraph graph, CUgraphNode node, CUgraph child);
  // A child graph node of a known graph given another child (cuGraphNodeSetParams): its union joins.
  void set_child(CUgraphNode node, CUgraph child);
  // A conditional node added to `graph` (cuGraphAddNode), with the body graphs the driver made for it,
  // empty: the program fills them afterwards (node calls, or a capture into them), so each
  // instantiation, update, clone or nesting of `graph` takes their records as they are then, whether a
  // launch runs a body or not.
  void add_conditional(CUgraph graph, CUgraphNode node, std::span<const CUgraph> bodies);
  void cloned(CUgraph original, CUgraph clone, std::span<const CUgraphNode> nodes);
  void instantiated(CUgraph graph, CUgraphExec exec);
  void updated(CUgraphExec exec, CUgraph graph);
  void graph_destroyed(CUgraph graph);
  void exec_destroyed(CUgraphExec exec);

  // What a launch of `exec` touches, into `out` (cleared first). False when the executable graph is
  // unknown or opaque: the launch is then unread.
  bool launch_ranges(CUgraphExec exec, std::vector<Range>* out) const;

 private:
  struct Record {
    std::set<Range> ranges;
    bool opaque = false;
    void add(const std::vector<Range>* r);
    void add(const Record& other);
  };
  mutable Mutex mu_;
  std::atomic<int> captures_{0};
  std::unordered_map<std::uint64_t, Record> captures_by_id_ UVMPOOL_GUARDED_BY(mu_);
  std::unordered_map<CUgraph, Record> graphs_ UVMPOOL_GUARDED_BY(mu_);
  std::unordered_map<CUgraphExec, Record> execs_ UVMPOOL_GUARDED_BY(mu_);
  std::unordered_map<CUgraphNode, CUgraph> nodes_ UVMPOOL_GUARDED_BY(mu_);  // the known nodes' graphs
  std::unordered_map<CUgraph, std::vector<CUgraph>> bodies_ UVMPOOL_GUARDED_BY(mu_);  // conditional nodes' bodies
  void note_nodes(CUgraph graph, std::span<const CUgraphNode> nodes) UVMPOOL_REQUIRES(mu_);
  // `graph`'s record with its conditional nodes' bodies', nested ones too; null for a graph not known.
  std::optional<Record> whole(CUgraph graph) const UVMPOOL_REQUIRES(mu_);
  void forget(CUgraph graph) UVMPOOL_REQUIRES(mu_);  // with its bodies
};

}  // namespace uvmpool::tiering
