// The mover's ordered epochs (UVMPOOL_TIERING_COPY=overlap; mover.h, "With `overlap`"): an epoch's
// copies run behind a fence beside the program's work, the program's work that touches what moves is
// ordered behind the commit by a wait on the flag in its own stream, and no stream is held.
//
// Why it is correct for the work the hooks see. Work queued before the fence: the copies wait for it,
// and the commit waits for the copies, so it is done before any remap. Work queued after the fence
// that touches a moving owner: it waits for the flag, which is raised after the commit; the fence and
// the owners' publication are made with the submission gate closed, and each launch, copy or memset
// asks order_value inside that gate, so it is either before the fence or sees the owners. Work after
// the fence that touches nothing moving runs on. The host-wait gate is closed while an epoch stands,
// as for a hold: a synchronous call waiting inside the driver behind an ordered launch would keep the
// commit's remaps out. What the hooks cannot see (a pointer read from device memory) is not ordered.
#include <algorithm>
#include <chrono>
#include <thread>

#include "config/log.h"
#include "driver/context_scope.h"
#include "tiering/mover.h"
#include "trace/trace.h"

namespace uvmpool::tiering {

namespace {

using driver::ContextScope;

std::int64_t steady_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void trace_move(trace::Kind kind, const pool::Move& m) {
  trace::record(kind, m.device, m.address, m.bytes, m.to == pool::Tier::Host ? m.bytes : 0);
}

}  // namespace

std::uint32_t Mover::order_value(const LaunchTouches& touches, bool all) {
  if (flight_count_.load(std::memory_order_seq_cst) == 0) return 0;
  const bool unknown = all || touches.dropped != 0;  // pointers past the cap are unknown: assume the worst
  MutexLock lock(flights_mu_);
  std::uint32_t value = 0;
  for (const Flight& f : flights_) {
    bool hit = unknown;
    for (std::size_t k = 0; !hit && k < touches.count; ++k) hit = touches.touches[k].owner == f.owner;
    if (hit) value = std::max(value, f.value);
  }
  return value;
}

void Mover::wait_released(std::uint32_t value) {
  const volatile std::uint32_t* flag = flag_host_seen_.load(std::memory_order_acquire);
  if (flag == nullptr) return;
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < value) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void Mover::publish(const Epoch& e, std::uint32_t value) {
  std::vector<std::uintptr_t> owners;
  for (const pool::Move& m : e.moves) owners.push_back(m.owner);
  for (const Request& r : e.waiting) owners.push_back(pool_.probe(r.address).owner);
  MutexLock lock(flights_mu_);
  for (std::uintptr_t owner : owners)
    if (owner != 0) flights_.push_back({owner, value});
  flight_count_.store(flights_.size(), std::memory_order_seq_cst);
}

void Mover::unpublish(std::uint32_t value) {
  MutexLock lock(flights_mu_);
  std::erase_if(flights_, [value](const Flight& f) { return f.value == value; });
  flight_count_.store(flights_.size(), std::memory_order_seq_cst);
}

CUresult Mover::place_ordered() {
  if (placed_.size() >= std::max<std::size_t>(config_.holds_ahead, 1)) return CUDA_ERROR_NOT_READY;
  // The gate stays open a while after a close that found calls staying inside (below).
  if (placed_.empty() && std::chrono::steady_clock::now() < gate_retry_at_) return CUDA_ERROR_NOT_READY;
  // As for holds (pipeline_step): no epoch is added while a program call waits at the closed gate, so
  // it gets in once the standing ones commit rather than behind epoch after epoch (placed by the
  // launching thread as the policy asks, they could come without end), nor while a pool path waits
  // for the device (the breaker would refuse it).
  if (!placed_.empty() && streams_.host_waits().has_waiters()) return CUDA_ERROR_NOT_READY;
  if (breaker_.pool_waiting()) return CUDA_ERROR_NOT_READY;
  if (!epoch_state_.active) {
    if (const CUresult r = prepares_at_hold() ? take_for_hold() : begin(); r != CUDA_SUCCESS) return r;
    if (!epoch_state_.active) return CUDA_SUCCESS;  // nothing to move
  }
  Epoch& e = epoch_state_;
  const auto put_off_epoch = [&]() UVMPOOL_REQUIRES(epoch_mu_) {
    std::vector<Request> taken = e.taken;  // abort_all forgets the epoch
    taken.insert(taken.end(), e.waiting.begin(), e.waiting.end());
    abort_all();
    return put_off(taken);
  };
  // The first standing epoch closes the host-wait gate, as the first hold does (place_locked: a call
  // staying inside past the gate's patience puts the epoch off and leaves the gate open a while).
  if (!close_gate_for_epoch()) return put_off_epoch();
  const std::uint32_t value = epoch_ + 1;
  // A pool path waiting for the device would wait for the ordered work: no epoch while one does.
  const bool may = breaker_.may_hold(value, gate_opens_);
  if (!may || !streams_.submissions().close(config_.gate_patience)) {
    if (placed_.empty()) streams_.host_waits().open();
    return put_off_epoch();
  }
  epoch_ = value;
  set_step(MoverStep::Preparing);
  publish(e, value);
  Held fence;
  const bool fenced = record_on_streams(false, 0, &fence);
  if (!fenced) unpublish(value);  // before the gate opens: no work was ordered behind it
  streams_.submissions().open();
  if (!fenced) {  // a stream captures a graph, or refused the event
    forget(&fence);
    if (placed_.empty()) streams_.host_waits().open();
    return put_off_epoch();
  }
  Placed p;
  p.value = value;
  p.standing = true;
  e.fence = std::move(fence);
  p.epoch = std::move(e);
  e = Epoch{};
  p.copying = false;
  if (!prepares_at_hold()) start_ordered_copies(p);
  p.first_since = std::chrono::steady_clock::now();
  p.marks_passed = progress_.passed();
  if (placed_.empty()) {
    std::int64_t none = 0;  // the stall guard's clock starts with the first standing epoch
    oldest_hold_ns_.compare_exchange_strong(none, steady_ns_now(), std::memory_order_acq_rel);
  }
  placed_.push_back(std::move(p));
  standing_.store(placed_.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

void Mover::start_ordered_copies(Placed& p) {
  Epoch& e = p.epoch;
  if (!e.waiting.empty()) {  // prepared at the hold: from the room the epochs before it left
    std::vector<Request> batch = std::move(e.waiting);
    e.waiting.clear();
    const int device = e.device;
    std::swap(e, epoch_state_);  // prepare_requests fills the epoch under way
    std::vector<Request> later;
    if (capture_in_progress()) {
      later = std::move(batch);
    } else {
      set_step(MoverStep::Preparing);
      prepare_requests(std::move(batch), true, &later);
    }
    std::swap(e, epoch_state_);
    if (e.device < 0) e.device = device;
    e.copied.assign(e.moves.size(), 0);
    // Not to a later standing epoch: work queued after its fence that touches these was not ordered
    // behind it. Placed again, behind a fence of their own.
    put_back(later);
  }
  p.copying = true;
  if (e.moves.empty()) return;
  set_step(MoverStep::Copying);
  std::swap(e, epoch_state_);  // enqueue_copies works on the epoch under way
  if (enqueue_copies(&epoch_state_.fence, false, epoch_state_.fence.frees_before) != CUDA_SUCCESS) std::fill(epoch_state_.copied.begin(), epoch_state_.copied.end(), 0);
  std::swap(e, epoch_state_);
  // An event after each copy stream's copies: the epoch's copies, and the work before its fence, are
  // done when both are. Without them, the completion waits for the copy streams as a whole.
  const DeviceResources& res = devices_[static_cast<std::size_t>(e.device)];
  ContextScope in(d_, res.context);
  for (CUstream c : res.copy) {
    CUevent ev = nullptr;
    if (in.status() != CUDA_SUCCESS || d_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) continue;
    if (d_.cuEventRecord(ev, c) != CUDA_SUCCESS) {
      d_.cuEventDestroy_v2(ev);
      continue;
    }
    p.hold.events.push_back({res.context, ev});
  }
}

CUresult Mover::complete_ordered(bool wait) {
  Placed& first = placed_.front();
  // Released for a pool wait or by the stall guard: the ordered work ran on, nothing of it commits.
  if (!first.given_up && breaker_.broken(first.value)) first.given_up = true;
  if (!first.copying) {  // prepared at the hold: once the work before its fence is done
    bool reached = true;
    for (const Held::Recorded& r : first.epoch.fence.events) {
      ContextScope in(d_, r.context);
      if (wait) {
        d_.cuEventSynchronize(r.event);
      } else if (d_.cuEventQuery(r.event) == CUDA_ERROR_NOT_READY) {
        reached = false;
        break;
      }
    }
    if (!reached && first.given_up) return CUDA_ERROR_NOT_READY;
    if (reached) {
      if (first.given_up) {  // nothing is prepared for an epoch given up
        first.copying = true;
        put_back(first.epoch.waiting);
        first.epoch.waiting.clear();
      } else {
        start_ordered_copies(first);
      }
    }
  }
  // Its copies' events: all done, some not yet, or one failed (then the copy streams are waited for
  // below, and a failing wait drops the moves: copies_done).
  bool failed = false;
  bool done = first.copying;
  for (const Held::Recorded& r : first.hold.events) {
    if (!done) break;
    ContextScope in(d_, r.context);
    const CUresult q = d_.cuEventQuery(r.event);
    done = q != CUDA_ERROR_NOT_READY;
    failed |= done && q != CUDA_SUCCESS;
  }
  if (!done) {  // its copies are not done (nor, maybe, the work before its fence)
    if (!wait) {
      if (first.given_up) return CUDA_ERROR_NOT_READY;  // aborted once its copies are done
      const auto now = std::chrono::steady_clock::now();
      if (now - first.first_since < config_.hold_timeout) return CUDA_ERROR_NOT_READY;
      if (still_progressing(&first.marks_passed)) {  // a busy device: another timeout
        first.first_since = now;
        return CUDA_ERROR_NOT_READY;
      }
      // The work before the fence does not finish: it may wait for work ordered behind an epoch, or
      // for a call waiting at the gate. Every standing epoch is given up; the work goes on.
      give_up_ordered();
      note_given_up();
      return CUDA_ERROR_NOT_READY;
    }
    for (const Held::Recorded& r : first.hold.events) {
      ContextScope in(d_, r.context);
      failed |= d_.cuEventSynchronize(r.event) != CUDA_SUCCESS;
    }
  }
  Placed p = pop_placed();
  epoch_state_ = std::move(p.epoch);
  Epoch& e = epoch_state_;
  const bool evented = e.moves.empty() || p.hold.events.size() == devices_[static_cast<std::size_t>(e.device)].copy.size();
  forget(&p.hold);
  forget(&e.fence);  // done: the copies waited for it
  if (!evented || failed) copies_done(true);
  if (config_.after_copy) config_.after_copy();
  std::vector<CUresult> results(e.moves.size(), CUDA_ERROR_NOT_READY);
  if (p.given_up) {
    // The copies are done: the staging pieces go back, nothing commits.
    const std::vector<Request> taken = e.taken;  // abort_all forgets the epoch
    failed_.fetch_add(e.moves.size(), std::memory_order_relaxed);
    abort_all();
    settle(taken);
  } else {
    std::unique_lock<std::mutex> window;  // the breaker's commit window, across the remaps
    bool remaps_closed = false;
    // The pool's lock is held from here to the end of the remaps. The copies are done, so is the work
    // before the fence; the work after it that touches these moves waits for the flag.
    const pool::Quiesce quiesce = [&](std::span<char> commit) UVMPOOL_REQUIRES(epoch_mu_) {
      set_step(MoverStep::ClosingGate);
      // The program's copies and memsets stay out of the driver during the remaps (finish() says why).
      if (!streams_.remaps().close(config_.gate_patience)) return false;
      remaps_closed = true;
      if (!breaker_.open_commit(p.value, &window)) return false;
      set_step(MoverStep::Committing);
      for (std::size_t i = 0; i < e.moves.size(); ++i) commit[i] = e.copied[i];
      return true;
    };
    std::vector<pool::Move*> pointers;
    for (pool::Move& m : e.moves) pointers.push_back(&m);
    set_step(MoverStep::WaitingForPool);
    pool_.commit_quiesced(e.device, pointers, quiesce, results);
    if (remaps_closed) streams_.remaps().open();
    if (window.owns_lock()) window.unlock();
    if (trace::recording())
      for (std::size_t i = 0; i < e.moves.size(); ++i)
        trace_move(results[i] == CUDA_SUCCESS ? trace::Kind::Moved : trace::Kind::MoveDropped, e.moves[i]);
  }
  // Unpublished before the flag: work queued from here on needs no wait, and work ordered behind
  // this epoch goes on with the flag.
  unpublish(p.value);
  raise_flag(flag_, p.value);
  if (placed_.empty()) {
    oldest_hold_ns_.store(0, std::memory_order_release);
    streams_.host_waits().open();
  } else {
    oldest_hold_ns_.store(steady_ns_now(), std::memory_order_release);
  }
  // The ordered work goes on as the device sees the flag; a query lets the simulator see it too.
  for (const DeviceResources& res : devices_) {
    if (res.copy[0] == nullptr) continue;
    ContextScope in(d_, res.context);
    d_.cuStreamQuery(res.copy[0]);
    break;
  }
  if (!p.given_up) {
    const Epoch done = std::move(e);
    e = Epoch{};
    settle(done.taken);
    put_offs_ = 0;
    count_results(done, results);
  }
  set_step(placed_.empty() ? MoverStep::Idle : MoverStep::Copying);
  return CUDA_SUCCESS;
}

void Mover::give_up_ordered() {
  if (placed_.empty()) return;
  for (Placed& p : placed_) {
    p.given_up = true;
    unpublish(p.value);
  }
  raise_flag(flag_, placed_.back().value);
  streams_.host_waits().open();
  oldest_hold_ns_.store(0, std::memory_order_release);
}

}  // namespace uvmpool::tiering
