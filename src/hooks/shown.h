// What the tiering hooks wrap around each call they forward: a kernel launch (launch_hooks.cpp), a
// copy or memset (transfer_hooks.cpp) or a graph launch (graph_hooks.cpp) is shown to tiering before the driver gets it (what it
// touches), ordered behind the moves it touches right before the driver call (overlap), and shown
// after (what it touched, to the policy; src/tiering/mover.h).
#pragma once

#include <optional>
#include <span>

#include "tiering/host_wait_gate.h"
#include "tiering/streams.h"
#include "tiering/tiering.h"

namespace uvmpool::hooks {

// Lives across the forwarded call.
class Shown {
 public:
  Shown(CUfunction f, CUstream stream, void** params, void** extra)
      : tiering_(tiering::Tiering::process()), stream_(stream) {
    if (tiering_ != nullptr) tiering_->before_launch(f, stream, params, extra, &seen_);
    queue(false);
  }
  Shown(tiering::Transfer kind, CUstream stream, std::span<const tiering::TransferRange> ranges)
      : tiering_(tiering::Tiering::process()), stream_(stream) {
    if (tiering_ != nullptr) tiering_->before_transfer(kind, stream, ranges, &seen_);
    queue(true);
  }
  Shown(CUgraphExec exec, CUstream stream) : tiering_(tiering::Tiering::process()), stream_(stream) {
    if (tiering_ != nullptr) tiering_->before_graph_launch(exec, stream, &seen_);
    queue(true);
  }
  ~Shown() {
    resolved_.reset();  // the driver call is over: a gate's closer may be waiting for it
    queued_.reset();
    if (tiering_ != nullptr) tiering_->after_launch(seen_, stream_);
  }
  Shown(const Shown&) = delete;
  Shown& operator=(const Shown&) = delete;

 private:
  // Through the submission gates (host_wait_gate.h, tiering/streams.h) for the driver call alone:
  // after the before_* call, which may wait for queue room or take the pool's locks, and out again
  // before after_launch, so a thread inside waits for nothing a gate's closer holds. `resolved`: the
  // driver resolves the call's addresses when it is called (copies, memsets, graph launches), so it
  // stays out of the remaps too.
  void queue(bool resolved) {
    if (tiering_ == nullptr) return;
    tiering::StreamRegistry& streams = tiering::StreamRegistry::process();
    queued_.emplace(streams.submissions());
    if (resolved) resolved_.emplace(streams.remaps());
    tiering_->order_behind_moves(seen_, stream_);  // inside the gate: before a fence, or sees its moves
  }

  tiering::Tiering* tiering_;
  CUstream stream_;
  tiering::LaunchSeen seen_;  // not zeroed: the before_* calls fill what after_launch reads
  std::optional<tiering::HostWaitGate::Pass> queued_;    // only around the driver call
  std::optional<tiering::HostWaitGate::Pass> resolved_;  // inside queued_
};

}  // namespace uvmpool::hooks
