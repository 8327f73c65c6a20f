// What the tiering hooks wrap around each call they forward: a kernel launch (launch_hooks.cpp), a
// copy or memset (transfer_hooks.cpp) or a graph launch (graph_hooks.cpp) is shown to tiering before the driver gets it (what it
// touches) and after (a move whose memory it touched meanwhile is dropped; src/tiering/mover.h).
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
    queue();
  }
  Shown(tiering::Transfer kind, CUstream stream, std::span<const tiering::TransferRange> ranges)
      : tiering_(tiering::Tiering::process()), stream_(stream) {
    if (tiering_ != nullptr) tiering_->before_transfer(kind, stream, ranges, &seen_);
    queue();
  }
  Shown(CUgraphExec exec, CUstream stream) : tiering_(tiering::Tiering::process()), stream_(stream) {
    if (tiering_ != nullptr) tiering_->before_graph_launch(exec, stream, &seen_);
    queue();
  }
  ~Shown() {
    queued_.reset();  // the driver call is over: the gate's holder may be waiting for it
    if (tiering_ != nullptr) tiering_->after_launch(seen_, stream_);
  }
  Shown(const Shown&) = delete;
  Shown& operator=(const Shown&) = delete;

 private:
  // Through the submission gate (host_wait_gate.h) for the driver call alone: after the before_*
  // call, which may wait for queue room or take the pool's locks, and out again before after_launch,
  // so a thread inside waits for nothing the gate's closer holds.
  void queue() {
    if (tiering_ != nullptr) queued_.emplace(tiering::StreamRegistry::process().submissions());
  }

  tiering::Tiering* tiering_;
  CUstream stream_;
  tiering::LaunchSeen seen_;  // not zeroed: the before_* calls fill what after_launch reads
  std::optional<tiering::HostWaitGate::Pass> queued_;  // only around the driver call
};

}  // namespace uvmpool::hooks
