#include "tiering/period_trial.h"

#include <algorithm>

#include "config/log.h"

namespace uvmpool::tiering {

PeriodTrial::PeriodTrial(PeriodTrialConfig config) : config_(config) { reset(); }

void PeriodTrial::reset() {
  first_ = config_.setting != TrialSetting::Second;
  state_ = State::Idle;
  stats_.second = first_ ? 0 : 1;
  stats_.timing = 0;
  samples_ = drifted_ = 0;
  best_ns_ = worst_ns_ = decided_ns_ = quiet_ = 0;
  rebased_ = by_drift_ = false;
}

void PeriodTrial::rebase(std::uint64_t n) {
  if (state_ != State::Decided) return;
  decided_ns_ = 0;
  drifted_ = 0;
  rebased_ = true;
  first_counted_ = n + 1;  // period n may carry the other trial's transition
}

bool PeriodTrial::retry(std::uint64_t n) {
  if (state_ != State::Decided) return false;
  begin_trial(n, n + 1, false);
  return true;
}

bool PeriodTrial::choose(bool first, std::uint64_t n, const char* why) {
  if (config_.setting != TrialSetting::Measure || (state_ != State::Decided && state_ != State::Idle)) return false;
  state_ = State::Decided;
  first_ = first;
  stats_.second = first ? 0 : 1;
  rebase(n);
  log::info("tiering: {} {}: chosen without a measure of its own ({})", config_.what,
            first ? config_.first_name : config_.second_name, why);
  return true;
}

void PeriodTrial::begin_trial(std::uint64_t n, std::uint64_t first_counted, bool by_drift) {
  ++stats_.trials;
  stats_.first_ns = stats_.second_ns = 0;
  by_drift_ = by_drift;
  began_on_first_ = first_;
  time_arm(true, n, first_counted);  // the first way first, as in every trial
}

void PeriodTrial::time_arm(bool first, std::uint64_t n, std::uint64_t first_counted) {
  state_ = first ? State::TimeFirst : State::TimeSecond;
  stats_.timing = 1;
  first_ = first;
  stats_.second = first ? 0 : 1;
  arm_began_ = n;
  first_counted_ = first_counted;
  samples_ = 0;
  best_ns_ = worst_ns_ = 0;
}

void PeriodTrial::decide(bool first, std::uint64_t n) {
  state_ = State::Decided;
  stats_.timing = 0;
  first_ = first;
  stats_.second = first ? 0 : 1;
  // Watched from the first period of the way: after a switch back, one of transition.
  first_counted_ = n + 1;
  drifted_ = 0;
  rebased_ = false;
  decided_ns_ = first ? stats_.first_ns : stats_.second_ns;
  // A drift that the trial did not bear out: wait longer before believing the next.
  if (by_drift_ && first == began_on_first_) {
    quiet_ = std::min<std::uint64_t>(std::max<std::uint64_t>(config_.backoff, 2 * quiet_), kMaxQuiet);
  } else if (by_drift_) {
    quiet_ = 0;
  }
  by_drift_ = false;
  if (stats_.second_ns == 0) {
    log::info("tiering: {} {}: the period could not be timed", config_.what, config_.first_name);
  } else {
    log::info("tiering: {} {}: the period took {:.3f} ms on the GPU {}, {:.3f} ms {} (its slowest {:.3f} ms)",
              config_.what, first ? config_.first_name : config_.second_name,
              static_cast<double>(stats_.first_ns) * 1e-6, config_.first_name,
              static_cast<double>(stats_.second_ns) * 1e-6, config_.second_name,
              static_cast<double>(worst_ns_) * 1e-6);
  }
}

void PeriodTrial::period_started(std::uint64_t n, std::optional<Time> measured, bool could_matter) {
  if (config_.setting != TrialSetting::Measure) return;
  const bool counts = measured && measured->ns != 0 && measured->period >= first_counted_;
  switch (state_) {
    case State::Idle:
      if (could_matter) begin_trial(n, n, false);  // the first way already: this period counts
      break;
    case State::TimeFirst:
    case State::TimeSecond:
      if (counts) {
        best_ns_ = samples_ == 0 ? measured->ns : std::min(best_ns_, measured->ns);
        worst_ns_ = std::max(worst_ns_, measured->ns);
        ++samples_;
      }
      if (samples_ >= config_.samples) {
        if (state_ == State::TimeFirst) {
          stats_.first_ns = best_ns_;
          time_arm(false, n, n + 1);  // this period is the transition
        } else {
          stats_.second_ns = best_ns_;
          decide(static_cast<double>(worst_ns_) > config_.margin * static_cast<double>(stats_.first_ns), n);
        }
      } else if (n - arm_began_ > config_.patience) {
        decide(true, n);  // no clock: the first way, as before any trial
        decided_ns_ = 0;
      }
      break;
    case State::Decided:
      if (counts && rebased_) {
        decided_ns_ = measured->ns;
        rebased_ = false;
      } else if (counts && decided_ns_ != 0 && measured->period >= first_counted_ + quiet_) {
        const double ratio = static_cast<double>(measured->ns) / static_cast<double>(decided_ns_);
        drifted_ = ratio > config_.drift || ratio * config_.drift < 1.0 ? drifted_ + 1 : 0;
        if (drifted_ >= config_.samples) begin_trial(n, first_ ? n : n + 1, true);  // after a transition if not first
      }
      break;
  }
}

}  // namespace uvmpool::tiering
