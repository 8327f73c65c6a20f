#include "tiering/guard_trial.h"

#include <algorithm>

#include "config/log.h"

namespace uvmpool::tiering {

GuardTrial::GuardTrial(GuardTrialConfig config) : config_(config) { reset(); }

void GuardTrial::reset() {
  on_ = config_.setting != GuardSetting::Off;
  state_ = State::Idle;
  stats_.off = on_ ? 0 : 1;
  samples_ = drifted_ = 0;
  best_ns_ = decided_ns_ = 0;
}

void GuardTrial::time_arm(bool on, std::uint64_t n, std::uint64_t first_counted) {
  state_ = on ? State::TimeOn : State::TimeOff;
  on_ = on;
  stats_.off = on ? 0 : 1;
  arm_began_ = n;
  first_counted_ = first_counted;
  samples_ = 0;
  best_ns_ = 0;
}

void GuardTrial::decide(bool on, std::uint64_t n) {
  state_ = State::Decided;
  on_ = on;
  stats_.off = on ? 0 : 1;
  // Watched from the first period of the setting: after a switch back on, one of transition.
  first_counted_ = n + 1;
  drifted_ = 0;
  decided_ns_ = on ? stats_.on_ns : stats_.off_ns;
  if (stats_.off_ns == 0) {
    log::info("tiering: thrash guard on: the period could not be timed");
  } else {
    log::info("tiering: thrash guard {}: the period took {:.3f} ms on the GPU with it on, {:.3f} ms with it off",
              on ? "on" : "off", static_cast<double>(stats_.on_ns) * 1e-6, static_cast<double>(stats_.off_ns) * 1e-6);
  }
}

void GuardTrial::period_started(std::uint64_t n, std::optional<Time> measured, bool kept_last_period) {
  if (config_.setting != GuardSetting::Measure) return;
  const bool counts = measured && measured->ns != 0 && measured->period >= first_counted_;
  switch (state_) {
    case State::Idle:
      if (kept_last_period) {
        ++stats_.trials;
        stats_.on_ns = stats_.off_ns = 0;
        time_arm(true, n, n);  // on already: this period counts
      }
      break;
    case State::TimeOn:
    case State::TimeOff:
      if (counts) {
        best_ns_ = samples_ == 0 ? measured->ns : std::min(best_ns_, measured->ns);
        ++samples_;
      }
      if (samples_ >= config_.samples) {
        if (state_ == State::TimeOn) {
          stats_.on_ns = best_ns_;
          time_arm(false, n, n + 1);  // this period is the transition
        } else {
          stats_.off_ns = best_ns_;
          decide(static_cast<double>(stats_.off_ns) > config_.margin * static_cast<double>(stats_.on_ns), n);
        }
      } else if (n - arm_began_ > config_.patience) {
        decide(true, n);  // no clock: the guard as it was before any trial
        decided_ns_ = 0;
      }
      break;
    case State::Decided:
      if (counts && decided_ns_ != 0) {
        const double ratio = static_cast<double>(measured->ns) / static_cast<double>(decided_ns_);
        drifted_ = ratio > config_.drift || ratio * config_.drift < 1.0 ? drifted_ + 1 : 0;
        if (drifted_ >= config_.samples) {
          ++stats_.trials;
          stats_.on_ns = stats_.off_ns = 0;
          time_arm(true, n, on_ ? n : n + 1);  // on first, as in every trial (after a transition if it was off)
        }
      }
      break;
  }
}

}  // namespace uvmpool::tiering
