#include "tiering/policy.h"

#include <algorithm>
#include <unordered_map>

#include "trace/trace.h"

namespace uvmpool::tiering {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

constexpr std::uint64_t kNever = ~std::uint64_t{0};

}  // namespace

Policy::Policy(World& world, PolicyConfig config)
    : world_(world), config_(config), guard_(config.guard), epochs_(config.epochs) {}

void Policy::on_launch(std::uint64_t function, std::span<const Buffer> buffers) {
  ++count_;
  ++stats_.launches;
  stream_order_ = world_.in_stream_order();
  if (count_ % kPruneEvery == 0) prune();
  // A buffer is an allocation (or a piece of one): pointers into the same one (tensors of one
  // caching-allocator segment) are one buffer, named by its base, so its bytes are counted and moved once.
  std::uint64_t signature = mix(0, function);
  std::vector<Buffer> touched;
  std::vector<std::pair<std::uint32_t, CUdeviceptr>> pointers;  // into touched, as Launch::pointers
  touched.reserve(buffers.size());
  for (const Buffer& b : buffers) {
    if (!incidental(b)) signature = mix(signature, b.address);
    const CUdeviceptr key = b.base != 0 ? b.base : b.address;
    auto same = std::find_if(touched.begin(), touched.end(), [&](const Buffer& t) { return t.address == key; });
    const std::size_t index = static_cast<std::size_t>(same - touched.begin());
    const auto passed = [&](const auto& q) { return q.first == index && q.second == b.address; };
    if (std::none_of(pointers.begin(), pointers.end(), passed))
      pointers.emplace_back(static_cast<std::uint32_t>(index), b.address);
    if (same != touched.end()) {
      same->host = same->host || b.host;
      continue;
    }
    touched.push_back({key, key, b.bytes, b.host, b.preference, b.allocation_bytes});
  }
  for (const Buffer& b : touched) {
    Known& k = known_[b.address];
    k.buffer = b;
    if (k.last_touch != 0) k.longest_gap = std::max(k.longest_gap, count_ - k.last_touch);
    k.last_touch = count_;
    if (!b.host && (!stream_order_ || k.demotion_asked == 0)) k.promotion_asked = 0;  // arrived (or never left)
  }
  buffers = touched;
  const std::uint64_t first_seen = functions_.try_emplace(function, count_).first->second;
  const Candidate proven = learn(signature, function, buffers, std::move(pointers), first_seen);
  const std::size_t phase_before = phase_;
  const std::uint64_t learned_before = stats_.periods_learned;
  if (!learned_.empty()) {
    const std::size_t n = learned_.size();
    if (first_seen > count_ - n) {
      phase_ = (phase_ + 1) % n;  // in place of the one expected: neither a match nor a miss
    } else if (matches(learned_[phase_], signature, function, buffers)) {
      misses_ = 0;
      ++learned_run_;
      phase_ = (phase_ + 1) % n;
    } else if (const std::size_t skipped = skipped_to(signature, function, buffers); skipped != 0) {
      misses_ = 0;  // the launches expected before it came later, or were replaced (see policy.h)
      ++learned_run_;
      phase_ = (phase_ + skipped + 1) % n;
    } else {
      // A miss: a launch not in the learned step, or in another place this time (the next may be the one
      // expected), or the one expected on other pointers: of the function expected, it takes that
      // launch's place, so the position moves on.
      if (learned_[phase_].function == function) phase_ = (phase_ + 1) % n;
      ++period_misses_;
      if (++misses_ <= config_.max_misses) {
      } else if (proven.period == n) {
        // The launches still repeat with this period, not as the learned copy says: it was taken while
        // the program warmed up (PyTorch's caching allocator still placing blocks). Take it again.
        adopt_period(proven);
      } else {
        drop_period();  // the program does something else now
      }
    }
  }
  // A period of the learned sequence ended with launches it did not foresee, and the launches still
  // repeat with its length: the copy is taken again from the last period, so the next one is planned
  // from where the program put its tensors this time (PyTorch's caching allocator places some anew
  // each step while it warms up, and a decode's activations rotate among segments).
  if (!learned_.empty() && phase_ < phase_before) {
    if (period_misses_ != 0 && proven.period == learned_.size()) adopt_period(proven, /*again=*/true);
    period_misses_ = 0;
  }
  // Another period that explained more launches than the one learned replaces it: that was a loop
  // inside the step. Not a multiple of it: that one matches wherever the learned one does, and also
  // where the program alternates between steps (double buffers, a decode's activations), so given
  // time it explains more, but with it every buffer is touched twice a period and none is kept in place.
  if (proven.period != 0 && proven.period != learned_.size() &&
      (learned_.empty() || (proven.run > learned_run_ && proven.period % learned_.size() != 0)))
    adopt_period(proven);
  if (learned_.empty()) {
    plan_recency(buffers);
    return;
  }
  if (phase_ < phase_before || stats_.periods_learned != learned_before) period_begins();
  plan_ahead();
}

void Policy::period_begins() {
  const std::uint64_t n = ++periods_begun_;
  const bool kept = stats_.kept_in_place != kept_at_period_;
  kept_at_period_ = stats_.kept_in_place;
  const std::uint64_t moves = stats_.promotions + stats_.demotions;
  const bool moved = moves != moves_at_period_;
  moves_at_period_ = moves;
  const std::optional<PeriodTrial::Time> time = world_.period_started(n);
  // One trial timed at a time, the guard's first (until it keeps something in place there are only
  // moves to time): each changes the period's time the other measures. What the guard kept stays
  // kept for this period.
  const bool guard_was = guard_.first(), epochs_were = epochs_.first(), epochs_timed = epochs_.timing();
  const bool guard_timed = guard_.timing();
  if (!epochs_.timing()) guard_.period_started(n, time, kept);
  if (guard_timed && !guard_.timing()) guard_decided(n);
  if (!guard_.timing()) epochs_.period_started(n, time, moved);
  // A way changed changes the period's time: the other trial's watch of its decision starts anew.
  // Where the epochs run sets how late moves land, which the guard's arms compare: the first time the
  // epochs' trial moves them to the launching thread, the guard is tried again there (once a learned
  // period: trials that each redo the other's could go back and forth).
  if (guard_.first() != guard_was) epochs_.rebase(n);
  const bool epochs_decided = epochs_timed && !epochs_.timing();
  if (epochs_decided && !epochs_.first() && !guard_retried_ && guard_.retry(n)) {
    guard_retried_ = true;
  } else if (epochs_.first() != epochs_were) {
    guard_.rebase(n);
  }
  stats_.guard = guard_.stats();
  stats_.epochs = epochs_.stats();
}

void Policy::guard_decided(std::uint64_t n) {
  // Moving pays only where moves land in time, and on the mover's thread they may land late (holds
  // ahead, a program queuing a step ahead); so where the guard's trial there was a close call (off
  // within the drift of on) and kept it on, few moves come after, and the epochs' trial, which needs
  // moves to compare, may never begin. The two ways that pay together are then tried together: the
  // epochs go to the launching thread untimed and the guard is tried again there. Three ways are then
  // timed: on with the mover's thread (the first trial), on and off with the launching thread (the
  // second). The launching thread is kept, with the guard as its trial decided, only if that way beat
  // on with the mover's thread by the margin; else both go back (decided: the launching thread with
  // the guard on was timed too).
  // Measured on an H200 (one CUDA graph a layer, 16 GEMM layers at 1.5x the device:
  // tests/gpu/graph_replay.py, docs/gpu-results.md): on the mover's thread off ran 1.05x slower than
  // on; on the launching thread off ran 179 ms a step against on's 943. Modeled on the batched decode
  // (weights read 32 times a token): on the mover's thread 201.9 ms a step on, 220.9 off; on the
  // launching thread off took 31.5 ms. A batch-1 decode's guard is no close call (6.4 ms on, 29.1
  // off): no second trial, which would cost it periods 4.5 times as long.
  const PeriodTrialStats g = guard_.stats();
  if (pair_tried_) {
    pair_tried_ = false;
    const std::uint64_t launching_ns = guard_.first() ? g.first_ns : g.second_ns;
    if (launching_ns != 0 && static_cast<double>(launching_ns) <= config_.guard.margin * static_cast<double>(pair_reference_ns_))
      return;
    if (!guard_.first()) guard_.choose(true, n, "off won on the launching thread, but not against on with the mover's thread");
    epochs_.choose(true, n, "the launching thread, tried with the guard, did not beat the mover's thread with it on");
    return;
  }
  const bool close_call = g.first_ns != 0 && g.second_ns != 0 &&
                          static_cast<double>(g.second_ns) < config_.guard.drift * static_cast<double>(g.first_ns);
  if (!guard_.first() || !close_call || guard_retried_ || !epochs_.first() || epochs_.timing()) return;
  if (!epochs_.choose(false, n, "the guard's trial was a close call on the mover's thread: tried again there")) return;
  guard_.retry(n);
  guard_retried_ = pair_tried_ = true;
  pair_reference_ns_ = g.first_ns;
}

void Policy::prune() {
  // Buffers not touched for a long while and not in the learned period: freed, most likely. Kept,
  // they would only grow the map (and the victims' scan).
  const std::uint64_t idle = 2 * std::max<std::uint64_t>(learned_.size(), kPruneEvery);
  std::erase_if(known_, [&](const auto& entry) {
    const Known& k = entry.second;
    return k.uses.empty() && k.promotion_asked == 0 && k.demotion_asked == 0 && count_ - k.last_touch > idle;
  });
}

bool Policy::matches(const Launch& before, std::uint64_t signature, std::uint64_t function,
                     std::span<const Buffer> now) const {
  if (before.signature == signature) return true;
  if (before.function != function) return false;
  std::size_t common = 0, keys = 0;
  for (const Buffer& b : now) {
    if (incidental(b)) continue;
    ++keys;
    common += std::find(before.keys.begin(), before.keys.end(), b.address) != before.keys.end();
  }
  return common > 0 && common + 1 >= std::max(before.keys.size(), keys);
}

bool Policy::keyed(std::span<const Buffer> buffers) const {
  return std::any_of(buffers.begin(), buffers.end(), [&](const Buffer& b) { return !incidental(b); });
}

std::size_t Policy::skipped_to(std::uint64_t signature, std::uint64_t function, std::span<const Buffer> now) const {
  // After m misses in a row, the launch may be the one expected up to m + 1 places further on: the m
  // were others in place of those expected (a kernel chosen differently this time), and one more
  // may have come later than it (another thread's launch, see policy.h).
  // Only a launch with a pointer of its own is looked for further than the next place: one over small
  // buffers alone has the same signature in every layer (a decode's activations), and taken for a
  // launch further on it put the sequence a layer off.
  const std::size_t n = learned_.size();
  const std::size_t reach = std::min(keyed(now) ? misses_ + 1 : 1, n - 1);
  for (std::size_t skip = 1; skip <= reach; ++skip)
    if (matches(learned_[(phase_ + skip) % n], signature, function, now)) return skip;
  return 0;
}

Policy::Candidate Policy::learn(std::uint64_t signature, std::uint64_t function, std::span<const Buffer> buffers,
                                std::vector<std::pair<std::uint32_t, CUdeviceptr>> pointers, std::uint64_t first_seen) {
  const std::uint64_t i = history_start_ + history_.size();  // this launch's position
  const bool keyed = this->keyed(buffers);
  for (auto c = candidates_.begin(); c != candidates_.end();) {
    if (first_seen > count_ - c->lag) {
      ++c;  // its function is newer than the launch it would repeat: neither a match nor a miss
      continue;
    }
    // The launch this one should repeat is `lag` back: the period, give or take a launch that came
    // in another place (see the launches matched against the learned period, in on_launch).
    const auto before = [&](std::size_t back) -> const Launch& { return history_[i - back - history_start_]; };
    // After a streak of misses, the repeat may lie up to streak + 1 launches nearer: those missed were
    // others in place of the ones expected, and one more may come later this time.
    const std::size_t reach = std::min(keyed ? c->streak + 1 : 1, c->lag - 1);
    std::size_t nearer = 0;
    while (nearer <= reach && !matches(before(c->lag - nearer), signature, function, buffers)) ++nearer;
    if (nearer <= reach) {
      ++c->run;
      c->streak = 0;
      c->lag -= nearer;
    } else if (++c->misses > 1 + c->run / 32 || ++c->streak > config_.max_misses || c->lag >= history_.size() ||
               c->lag >= c->period + config_.max_misses) {
      c = candidates_.erase(c);  // not this period
      continue;
    } else if (before(c->lag).function != function) {
      ++c->lag;  // one not in the step (or in another place this time): the next may be the one expected
    }  // else the one expected, on other pointers: the next repeats the launch after it
    // A lag that stays off the period for a whole period is the period (a launch once repeated two
    // back, since every launch: the same launch over and over).
    c->drift = c->lag == c->period ? 0 : c->drift + 1;
    if (c->drift > c->period) {
      c->period = c->lag;
      c->drift = 0;
    }
    ++c;
  }
  if (const auto seen = last_seen_.find(signature); seen != last_seen_.end() && seen->second >= history_start_) {
    const std::size_t period = i - seen->second;  // at most the history's length, so at most max_period
    const auto same = [&](const Candidate& c) { return c.period == period || c.lag == period; };
    if (std::none_of(candidates_.begin(), candidates_.end(), same)) {
      if (candidates_.size() == kCandidates) {  // the one with the shortest run makes room
        candidates_.erase(std::min_element(candidates_.begin(), candidates_.end(),
                                           [](const Candidate& a, const Candidate& b) { return a.run < b.run; }));
      }
      candidates_.push_back({period, period, 1, 0, 0, 0});
    }
  }
  // Proven: of the candidates repeated over a whole period, the one that explained the most launches
  // (a loop inside the step explains fewer than the step; a multiple of the step's period, found
  // later, fewer too), the shorter of two alike.
  Candidate proven;
  for (const Candidate& c : candidates_) {
    if (c.run < std::max(c.period, config_.min_repeat) || c.lag != c.period) continue;
    if (proven.period == 0 || c.run > proven.run || (c.run == proven.run && c.period < proven.period)) proven = c;
  }
  Launch launch{signature, function, {}, {}, std::move(pointers)};
  for (const Buffer& b : buffers) {
    launch.buffers.push_back(b.address);
    if (!incidental(b)) launch.keys.push_back(b.address);
  }
  history_.push_back(std::move(launch));
  last_seen_[signature] = i;
  if (history_.size() > config_.max_period) {
    history_.pop_front();
    ++history_start_;
  }
  // Signatures not seen within the history are no candidates any more; forget them now and then.
  if (i % config_.max_period == 0)
    std::erase_if(last_seen_, [&](const auto& entry) { return entry.second < history_start_; });
  return proven;
}

void Policy::drop_period() {
  learned_.clear();
  for (auto& [address, k] : known_) {
    k.uses.clear();
    k.period_reads = 0;
  }
  ++stats_.periods_dropped;
  stats_.period = 0;
  trace::record(trace::Kind::Period, -1, 0, 0);
  misses_ = 0;
}

void Policy::adopt_period(const Candidate& proven, bool again) {
  const std::size_t period = proven.period;
  // Taken anew, the sequence keeps the launches it explained: the candidate that proved it again may be
  // younger than it, and a multiple of the period must not replace it for that.
  learned_run_ = again ? std::max(learned_run_, proven.run) : proven.run;
  // The last period, each launch keeping the pointers the one a period before it passed too (a word
  // that changes every step is no buffer the launch uses; matches() let it through).
  const std::size_t first = history_.size() - period;
  learned_.assign(history_.begin() + static_cast<std::ptrdiff_t>(first), history_.end());
  for (std::size_t pos = 0; pos < period && first >= period; ++pos) {
    const Launch& before = history_[first - period + pos];
    Launch& now = learned_[pos];
    if (before.function != now.function) continue;
    Launch kept = now;
    kept.buffers.clear();
    kept.pointers.clear();
    for (std::size_t i = 0; i < now.buffers.size(); ++i) {
      if (std::find(before.buffers.begin(), before.buffers.end(), now.buffers[i]) == before.buffers.end()) continue;
      for (const auto& [index, pointer] : now.pointers)
        if (index == i) kept.pointers.emplace_back(static_cast<std::uint32_t>(kept.buffers.size()), pointer);
      kept.buffers.push_back(now.buffers[i]);
    }
    if (!kept.buffers.empty()) now = std::move(kept);
  }
  for (auto& [address, k] : known_) k.uses.clear();
  for (std::size_t pos = 0; pos < learned_.size(); ++pos) {
    for (CUdeviceptr address : learned_[pos].buffers) {
      std::vector<std::uint32_t>& uses = known_[address].uses;
      if (uses.empty() || uses.back() != pos) uses.push_back(static_cast<std::uint32_t>(pos));
    }
  }
  count_period_reads();
  phase_ = 0;  // the launch just seen closed a period: the next one opens the next
  misses_ = 0;
  period_misses_ = 0;
  if (again) {
    ++stats_.periods_retaken;
    return;
  }
  guard_.reset();  // another sequence: whether the guard pays, and where epochs run best, measured again
  epochs_.reset();
  guard_retried_ = pair_tried_ = false;
  ++stats_.periods_learned;
  stats_.period = period;
  trace::record(trace::Kind::Period, -1, 0, period);
}

void Policy::count_period_reads() {
  // Where tensors begin in each buffer: every pointer a use passed into it, clipped to it.
  std::unordered_map<CUdeviceptr, std::vector<CUdeviceptr>> starts;
  const auto clip = [](const Known& k, CUdeviceptr p) {
    return std::clamp<CUdeviceptr>(p, k.buffer.base, k.buffer.base + k.buffer.bytes);
  };
  for (const Launch& l : learned_) {
    for (const auto& [index, pointer] : l.pointers) {
      const Known& k = known_[l.buffers[index]];
      starts[l.buffers[index]].push_back(clip(k, pointer));
    }
  }
  for (auto& [address, cuts] : starts) {
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  }
  for (auto& [address, k] : known_) k.period_reads = 0;
  for (const Launch& l : learned_) {
    for (std::size_t i = 0; i < l.buffers.size(); ++i) {
      Known& k = known_[l.buffers[i]];
      const std::vector<CUdeviceptr>& cuts = starts[l.buffers[i]];
      const CUdeviceptr end = k.buffer.base + k.buffer.bytes;
      std::uint64_t read = 0;
      for (const auto& [index, pointer] : l.pointers) {
        if (index != i) continue;
        const CUdeviceptr from = clip(k, pointer);
        const auto next = std::upper_bound(cuts.begin(), cuts.end(), from);
        read += (next != cuts.end() ? *next : end) - from;
      }
      k.period_reads += read != 0 ? read : k.buffer.bytes;
    }
  }
}

std::uint64_t Policy::next_use(const Known& k) const {
  if (k.uses.empty() || learned_.empty()) return kNever;
  const auto it = std::lower_bound(k.uses.begin(), k.uses.end(), static_cast<std::uint32_t>(phase_));
  if (it != k.uses.end()) return *it - phase_;
  return learned_.size() - phase_ + k.uses.front();
}

bool Policy::may_promote(const Known& k) {
  return stream_order_ ? planned_host(k) : k.promotion_asked == 0 && world_.in_host(k.buffer);
}

bool Policy::may_demote(const Known& k) {
  if (stream_order_) return !planned_host(k);
  return k.promotion_asked == 0 && k.demotion_asked == 0 && !world_.in_host(k.buffer);
}

bool Policy::planned_host(const Known& k) {
  // The latest ask wins: moves of one buffer land in the order asked (the mover keeps it).
  // A part promoted (the thrash guard's) leaves the rest in host memory: not a buffer to demote.
  if (k.promotion_asked != 0 || k.demotion_asked != 0)
    return k.demotion_asked > k.promotion_asked || k.promotion_bytes < k.buffer.bytes;
  return world_.in_host(k.buffer);
}

bool Policy::cold(const Known& k) const {
  const std::uint64_t idle = count_ - k.last_touch;
  return idle >= config_.lookahead && idle >= config_.cold_after && idle >= 2 * k.longest_gap;
}

std::uint64_t Policy::pending_bytes(bool to_device, std::uint64_t within) {
  // Only the buffers asked for (a few dozen), not every buffer known: this runs on every launch.
  std::vector<CUdeviceptr>& asked_list = to_device ? asked_up_ : asked_down_;
  std::uint64_t bytes = 0;
  // Under run-ahead an ask lands when the device reaches the launch it was asked at, up to a step or
  // more later: only a world that cannot tell (moving() unknown) needs the horizon.
  const std::uint64_t horizon = (stream_order_ ? kAskHorizon : 1) * std::max<std::uint64_t>(learned_.size(), config_.lookahead);
  std::erase_if(asked_list, [&](CUdeviceptr address) {
    const auto it = known_.find(address);
    if (it == known_.end()) return true;
    Known& k = it->second;
    std::uint64_t& asked = to_device ? k.promotion_asked : k.demotion_asked;
    if (asked == 0) return true;
    // Where it lies now says the ask is done only with no ask the other way pending: under run-ahead
    // a promotion asked after a demotion not landed finds the buffer on the device already.
    const std::uint64_t other = to_device ? k.demotion_asked : k.promotion_asked;
    const bool done = (!stream_order_ || other == 0) && world_.in_host(k.buffer) != to_device;
    if (count_ - asked > horizon || done || !world_.moving(k.buffer)) {
      if (!done && to_device) k.refused_at = count_;
      asked = 0;  // done, or refused or dropped by the mover
      return true;
    }
    if (count_ - asked < within) bytes += to_device ? k.promotion_bytes : k.buffer.bytes;
    return false;
  });
  return bytes;
}

std::uint64_t Policy::room() {
  // Asked of the pool once a launch (it takes the pool's lock); the asks made since adjust it.
  if (room_at_ != count_) {
    const std::uint64_t free = world_.device_room() + pending_bytes(false);
    const std::uint64_t taken = pending_bytes(true);
    room_ = free > taken ? free - taken : 0;
    room_at_ = count_;
  }
  return room_;
}

void Policy::find_victims(std::uint64_t needed_at) {
  // Device buffers that may go, best first: with a period, those not needed within the lookahead
  // (with the thrash guard off, any needed later than the buffer promoted: make_room checks),
  // farthest next use first (Belady), then those outside the period that are cold; by recency, the
  // cold ones, least recently used first. Once a launch: make_room takes from the front.
  victims_.clear();
  victims_taken_ = 0;
  victims_at_ = count_;
  const bool by_period = needed_at != kNever && !learned_.empty();
  for (auto& [address, k] : known_) {
    // On the device, with no ask pending; in the streams' order, once every ask lands (a promotion
    // asked counts: it lands where the program is now).
    if (!may_demote(k) || k.last_touch == count_ || k.buffer.bytes == 0) continue;
    if (k.buffer.preference == Preference::Device) continue;  // advised to stay
    std::uint64_t rank = 0;
    if (k.buffer.preference == Preference::Host) {
      rank = kNever - 1;  // advised to lie in host memory: the first to go
    } else if (by_period && !k.uses.empty()) {
      rank = next_use(k);
      if (rank < config_.lookahead && guard_.first()) continue;
    } else {
      if (!cold(k)) continue;
      rank = by_period ? learned_.size() + (count_ - k.last_touch) : count_ - k.last_touch;
    }
    victims_.emplace_back(rank, address);
  }
  std::sort(victims_.begin(), victims_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
}

bool Policy::make_room(std::uint64_t bytes, std::uint64_t needed_at) {
  if (room() >= bytes) return true;
  if (victims_at_ != count_) find_victims(needed_at);
  // Only if enough can go: demoting and then not promoting would move bytes for nothing.
  std::uint64_t freed = 0;
  std::size_t last = victims_taken_;
  for (; last < victims_.size() && room() + freed < bytes; ++last) {
    if (needed_at != kNever && victims_[last].first <= needed_at) return false;  // needed sooner
    const auto it = known_.find(victims_[last].second);
    if (it == known_.end() || !may_demote(it->second)) continue;
    freed += it->second.buffer.bytes;
  }
  if (room() + freed < bytes) return false;
  for (; victims_taken_ < last; ++victims_taken_) {
    const auto it = known_.find(victims_[victims_taken_].second);
    if (it == known_.end() || !may_demote(it->second)) continue;
    Known& k = it->second;
    if (!world_.move(k.buffer, pool::Tier::Host)) continue;
    if (k.demotion_asked == 0) asked_down_.push_back(k.buffer.address);  // listed once
    k.demotion_asked = count_;
    ++stats_.demotions;
    if (learned_.empty()) ++k.demotions;
    room_ += k.buffer.bytes;
  }
  return room() >= bytes;
}

void Policy::advised(std::span<const Advised> allocations) {
  if (allocations.empty()) return;
  bool changed = false;
  for (auto& [address, k] : known_) {
    // The last allocation starting at or before the buffer: the only one that may hold it.
    const auto after = std::upper_bound(allocations.begin(), allocations.end(), address,
                                        [](CUdeviceptr a, const Advised& x) { return a < x.from; });
    if (after == allocations.begin() || k.buffer.bytes == 0) continue;
    const Advised& a = *std::prev(after);
    if (address + k.buffer.bytes > a.end || k.buffer.preference == a.preference) continue;
    k.buffer.preference = a.preference;
    changed = true;
  }
  if (changed) victims_at_ = ~std::uint64_t{0};  // the victims found this launch are to be found again
}

bool Policy::kept_by_advice(Known& k) {
  if (k.buffer.preference != Preference::Host) return false;
  // Asked again each time, not decided for a period as the thrash guard decides: advice withdrawn, or
  // the address given to an allocation without it, lets the buffer move at its next touch. Counted
  // once a period (recency: once in kPruneEvery launches), as a decision.
  const std::uint64_t every = learned_.empty() ? kPruneEvery : learned_.size();
  if (k.advice_counted_at == 0 || count_ - k.advice_counted_at >= every) {
    ++stats_.kept_by_advice;
    k.advice_counted_at = count_;
  }
  return true;
}

void Policy::plan_ahead() {
  // In the streams' order an ask lands where it was made, up to a step later: the budget counts the
  // asks within the lookahead, the bytes the copies must carry before the launches looked at.
  std::uint64_t pending = pending_bytes(true, stream_order_ ? config_.lookahead : kAllAsks);
  const std::size_t period = learned_.size();
  const std::size_t depth = std::min(config_.lookahead, period);
  for (std::size_t d = 0; d < depth; ++d) {
    for (CUdeviceptr address : learned_[(phase_ + d) % period].buffers) {
      Known& k = known_[address];
      if (k.buffer.bytes == 0) continue;
      if (k.kept_at != 0 && count_ - k.kept_at < period) continue;  // decided for this period
      if (k.refused_at != 0 && count_ - k.refused_at < config_.lookahead) continue;
      if (!may_promote(k)) continue;
      if (kept_by_advice(k)) continue;
      // Within the budget for promotions in flight (one larger than it goes alone).
      if (pending != 0 && pending + k.buffer.bytes > config_.in_flight_bytes) {
        ++stats_.waited_in_flight;
        continue;
      }
      // Thrash guard: used once a period, and staying would push out others: read it in place
      // (while it pays: period_trial.h). What is already on the device needs no room.
      const std::uint64_t needed = stream_order_ && k.demotion_asked != 0 ? k.buffer.bytes : world_.host_bytes(k.buffer);
      if (guard_.first() && k.read_once() && room() < needed) {
        ++stats_.kept_in_place;
        k.kept_at = count_;
        // The room there is still takes part of it: that part is then read from the device, and
        // nothing was pushed out for it.
        if (const std::uint64_t part = room(); part != 0 && world_.promote_part(k.buffer, part)) {
          ++stats_.parts_promoted;
          if (stream_order_) {  // pending like any promotion, for the room it takes (at most `part`), until it lands
            if (k.promotion_asked == 0) asked_up_.push_back(address);
            k.promotion_asked = count_;
            k.promotion_bytes = part;
          }
          room_ = 0;
        }
        continue;
      }
      if (!make_room(needed, d)) {
        ++stats_.waited_room;
        continue;
      }
      if (!world_.move(k.buffer, pool::Tier::Device)) continue;
      if (k.promotion_asked == 0) asked_up_.push_back(address);  // listed once
      k.promotion_asked = count_;
      k.promotion_bytes = needed;
      pending += k.buffer.bytes;
      room_ = room_ > k.buffer.bytes ? room_ - k.buffer.bytes : 0;
      ++stats_.promotions;
    }
  }
}

void Policy::plan_recency(std::span<const Buffer> buffers) {
  std::uint64_t pending = 0;
  bool counted = false;
  for (const Buffer& b : buffers) {
    if (!b.host || b.bytes == 0) continue;
    Known& k = known_[b.address];
    if (k.kept_at != 0 && count_ - k.kept_at >= kPruneEvery) {  // decided long ago: think again
      k.kept_at = 0;
      k.demotions = 0;
    }
    if (k.promotion_asked != 0 || k.kept_at != 0) continue;
    if (kept_by_advice(k)) continue;
    if (k.demotions >= 2) {  // it went back and forth: read it in place for a while
      ++stats_.kept_in_place;
      k.kept_at = count_;
      continue;
    }
    if (!counted) {
      pending = pending_bytes(true);
      counted = true;
    }
    if ((pending != 0 && pending + b.bytes > config_.in_flight_bytes) || !make_room(b.bytes, kNever)) continue;
    if (!world_.move(b, pool::Tier::Device)) continue;
    if (k.promotion_asked == 0) asked_up_.push_back(b.address);
    k.promotion_asked = count_;
    k.promotion_bytes = b.bytes;
    pending += b.bytes;
    room_ = room_ > b.bytes ? room_ - b.bytes : 0;
    ++stats_.promotions;
  }
}

}  // namespace uvmpool::tiering
