// What the tiering mover is doing now, as the statistics show it (src/tiering/mover.h sets it;
// src/stats/format.cpp names it for uvmpool-stat). Header-only, so that the statistics' reader, which
// links no tiering code, shares these names.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uvmpool::tiering {

// What the mover is doing now (MoverStats::step), for a program that seems stuck: uvmpool-stat shows it
// with how long it has lasted (docs/observability.md). Set by whichever thread runs the mover's steps
// (its own, or a caller of run_epoch / place_epoch / complete_placed); the last one set is shown.
enum class MoverStep : std::uint8_t {
  Idle = 0,            // nothing queued, no hold standing
  Preparing = 1,       // preparing the moves of an epoch (the pool's prepare_move: staging mappings)
  ClosingGate = 2,     // waiting for the program's calls inside the driver before a hold (host_wait_gate.h)
  Draining = 3,        // a hold stands: waiting for the program's work queued before it to reach it
  WaitingForPool = 4,  // waiting for the device pool's lock to commit (a pool path holds it)
  Copying = 5,         // the epoch's copies under the hold
  Committing = 6,      // remapping at the moves' addresses (the pool's lock held)
  Fencing = 7,         // waiting for the program's queued work before idle memory is taken apart for room
};
inline constexpr std::size_t kMoverSteps = 8;
// The step as a metric label (tiering_mover_time{step=...}, collect.cpp).
constexpr const char* step_key(MoverStep step) {
  switch (step) {
    case MoverStep::Idle: return "idle";
    case MoverStep::Preparing: return "preparing";
    case MoverStep::ClosingGate: return "closing_gate";
    case MoverStep::Draining: return "draining";
    case MoverStep::WaitingForPool: return "waiting_for_pool";
    case MoverStep::Copying: return "copying";
    case MoverStep::Committing: return "remapping";
    case MoverStep::Fencing: return "fencing";
  }
  return "unknown";
}
// A phrase for uvmpool-stat ("mover waiting for the program's work to reach its hold for 12 s").
constexpr const char* step_name(MoverStep step) {
  switch (step) {
    case MoverStep::Idle: return "idle";
    case MoverStep::Preparing: return "preparing moves";
    case MoverStep::ClosingGate: return "closing the host-wait gate";
    case MoverStep::Draining: return "waiting for the program's work to reach its hold";
    case MoverStep::WaitingForPool: return "waiting for the pool's lock";
    case MoverStep::Copying: return "copying";
    case MoverStep::Committing: return "remapping";
    case MoverStep::Fencing: return "waiting for the program's queued work to take idle memory apart";
  }
  return "unknown";
}

}  // namespace uvmpool::tiering
