#include "tiering/mover.h"

#include <algorithm>
#include <optional>
#include <mutex>
#include <thread>

#include "config/log.h"
#include "driver/capture_mode.h"
#include "driver/context_scope.h"
#include "trace/trace.h"

namespace uvmpool::tiering {

namespace {

// A move's slice in the trace (trace.h: MoveBegin, Moved, MoveDropped); named by its direction.
void trace_move(trace::Kind kind, const pool::Move& m) {
  trace::record(kind, m.device, m.address, m.bytes, m.to == pool::Tier::Host ? m.bytes : 0);
}

using driver::ContextScope;

bool context_gone(CUresult r) {
  return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// Whether `stream` is capturing a graph. Asking about the legacy stream while another stream captures
// in global mode is itself refused (STREAM_CAPTURE_IMPLICIT): that counts as capturing too.
bool capturing(const driver::Table& d, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = d.cuStreamIsCapturing(stream, &status);
  if (r == CUDA_SUCCESS) return status != CU_STREAM_CAPTURE_STATUS_NONE;
  return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}

}  // namespace

Mover::Mover(const driver::Table& driver, pool::Pool& pool, StreamRegistry& streams, MoverConfig config)
    : d_(driver), pool_(pool), streams_(streams), config_(config), progress_(driver, config.progress_every) {
  pool_.set_device_waits(&breaker_, nullptr);
  on_launch_.store(config_.on_launch, std::memory_order_relaxed);
}

Mover::~Mover() {
  stop();
  MutexLock lock(epoch_mu_);
  give_up_placed();  // placed by a caller of place_epoch, not completed
  if (epoch_state_.active) abort_all();  // prepared, nothing copied yet
  pool_.set_device_waits(nullptr, &breaker_);  // no hold stands any more; the flag goes below
  for (DeviceResources& r : devices_) {
    if (r.context == nullptr) continue;
    {
      ContextScope in(d_, r.context);
      for (CUstream c : r.copy) {
        if (c != nullptr) d_.cuStreamDestroy_v2(c);
      }
      for (CUevent ev : r.copy_events) d_.cuEventDestroy_v2(ev);
      if (flag_ != nullptr) {  // pinned memory is portable: freed in whichever context comes first
        d_.cuMemFreeHost(const_cast<std::uint32_t*>(flag_));
        flag_ = nullptr;
      }
    }
    CUdevice device = 0;
    if (d_.cuDeviceGet(&device, static_cast<int>(&r - devices_.data())) == CUDA_SUCCESS) d_.cuDevicePrimaryCtxRelease_v2(device);
  }
}

void Mover::set_on_launch(bool on) {
  // Called after every launch shown: a plain read while nothing changes (no write to share the line).
  if (on_launch_.load(std::memory_order_relaxed) == on || on_launch_.exchange(on, std::memory_order_relaxed) == on) return;
  {
    MutexLock lock(queue_mu_);  // so the thread's wait sees it (it reads on_launch_ under this lock)
  }
  queue_cv_.notify_all();  // back to the thread: it takes the requests queued meanwhile
}

bool Mover::request(CUdeviceptr p, std::size_t bytes, pool::Tier to) {
  if (p == 0 || bytes == 0 || off_.load(std::memory_order_relaxed)) return false;
  {
    MutexLock lock(queue_mu_);
    if (queue_.size() >= kMaxQueued) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back({p, bytes, to});
    queued_.store(true, std::memory_order_relaxed);
    ++outstanding_[p];
    if (config_.thread && !stopping_ && !thread_.joinable()) {
      thread_ = std::thread(&Mover::thread_main, this);
      if (pipelined() || ordered()) guard_ = std::thread(&Mover::guard_main, this);
    }
  }
  requested_.fetch_add(1, std::memory_order_relaxed);
  queue_cv_.notify_one();
  return true;
}

void Mover::stop() {
  std::thread t, guard;
  {
    MutexLock lock(queue_mu_);
    stopping_ = true;
    t = std::move(thread_);
    guard = std::move(guard_);
  }
  queue_cv_.notify_all();
  guard_cv_.notify_all();
  if (t.joinable()) t.join();
  if (guard.joinable()) guard.join();
}

namespace {
std::int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void Mover::set_step(MoverStep step) {
  const MoverStep was = step_.load(std::memory_order_relaxed);
  if (was == step) return;
  const std::int64_t now = config_.step_clock ? config_.step_clock() : steady_ns(std::chrono::steady_clock::now());
  // The step that ends gets its time. Two threads running steps at once (a launching thread's poll
  // beside the mover's own) share the one clock: their sum is then approximate, never lost wholesale.
  const std::int64_t since = step_since_ns_.exchange(now, std::memory_order_relaxed);
  if (since != 0 && now > since) step_ns_[static_cast<std::size_t>(was)].fetch_add(static_cast<std::uint64_t>(now - since), std::memory_order_relaxed);
  step_.store(step, std::memory_order_release);
}

void Mover::guard_main() {
  driver::relax_capture_mode(d_);  // its queries must not spoil a program's graph capture
  const auto limit = std::chrono::duration_cast<std::chrono::nanoseconds>(2 * config_.hold_timeout).count();
  const auto period = std::max<std::chrono::milliseconds>(config_.hold_timeout / 4, std::chrono::milliseconds(1));
  for (;;) {
    {
      UniqueMutexLock lock(queue_mu_);
      guard_cv_.wait_for(lock.native(), period, [this]() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; });
      if (stopping_) return;
    }
    std::int64_t since = oldest_hold_ns_.load(std::memory_order_acquire);
    const std::int64_t now = steady_ns(std::chrono::steady_clock::now());
    if (since == 0 || now - since < limit) continue;
    // The mover's thread gives the oldest hold up at the hold timeout when it runs: it did not. The
    // next look waits another two hold timeouts.
    oldest_hold_ns_.compare_exchange_strong(since, now, std::memory_order_acq_rel);
    if (!breaker_.release_all()) continue;
    const MoverStep step = step_.load(std::memory_order_acquire);
    const std::int64_t step_since = step_since_ns_.load(std::memory_order_relaxed);
    log::warn("tiering: the mover made no progress for {} ms while holds stood; every standing hold is released, "
              "their moves dropped (the mover was {} for {} ms)",
              std::chrono::duration_cast<std::chrono::milliseconds>(2 * config_.hold_timeout).count(), step_name(step),
              step_since != 0 && now > step_since ? (now - step_since) / 1000000 : 0);
    count_given_up();
  }
}

void Mover::thread_main() {
  driver::relax_capture_mode(d_);  // its queries and waits must not spoil a program's graph capture
  for (;;) {
    {
      UniqueMutexLock lock(queue_mu_);
      if (queue_.empty() && standing_.load(std::memory_order_relaxed) == 0) set_step(MoverStep::Idle);
      // Requests are the launching thread's while it runs the epochs (on_launch): then only holds
      // placed before it took them over wake this one.
      queue_cv_.wait(lock.native(), [this]() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || (!queue_.empty() && !on_launch()) || standing_.load(std::memory_order_relaxed) != 0;
      });
      if (stopping_) break;
    }
    if (pipelined() || ordered()) {
      CUresult r = CUDA_SUCCESS;
      {
        MutexLock epoch(epoch_mu_);
        r = pipeline_step();
      }
      // Holds stand, not drained yet: look again shortly (a drain is the program's work, ms to s).
      if (r == CUDA_ERROR_NOT_READY) std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    // Put off by a graph capture: try again shortly (captures are short).
    if (!on_launch() && run_epoch() == CUDA_ERROR_NOT_READY) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MutexLock epoch(epoch_mu_);
  give_up_placed();
}

CUresult Mover::run_until_idle() {
  for (;;) {
    {
      MutexLock lock(queue_mu_);
      if (queue_.empty()) return CUDA_SUCCESS;
    }
    if (const CUresult r = run_epoch(); r != CUDA_SUCCESS) return r;
  }
}

bool Mover::take_batch(std::vector<Request>* batch) {
  MutexLock lock(queue_mu_);
  if (queue_.empty()) return false;
  // Oldest first, up to a batch in each direction.
  std::array<std::size_t, 2> bytes{0, 0};
  std::array<bool, 2> full{false, false};
  for (auto it = queue_.begin(); it != queue_.end() && batch->size() < kMaxFlight && !(full[0] && full[1]);) {
    const std::size_t d = direction(it->to);
    if (full[d] || (bytes[d] != 0 && bytes[d] + it->bytes > config_.max_batch_bytes)) {
      full[d] = true;
      ++it;
      continue;
    }
    // The same memory asked both ways: the later ask waits for the next epoch, so they run in order.
    const bool crossed = std::any_of(batch->begin(), batch->end(), [&](const Request& r) {
      return r.to != it->to && r.address < it->address + it->bytes && it->address < r.address + r.bytes;
    });
    if (crossed) {
      ++it;
      continue;
    }
    bytes[d] += it->bytes;
    batch->push_back(*it);
    it = queue_.erase(it);
  }
  queued_.store(!queue_.empty(), std::memory_order_relaxed);
  return true;
}

void Mover::settle(const Request& r) {
  MutexLock lock(queue_mu_);
  const auto it = outstanding_.find(r.address);
  if (it != outstanding_.end() && --it->second == 0) outstanding_.erase(it);
}

void Mover::settle(const std::vector<Request>& requests) {
  for (const Request& r : requests) settle(r);
}

bool Mover::outstanding(CUdeviceptr p, std::uint64_t bytes) {
  MutexLock lock(queue_mu_);
  const auto it = outstanding_.lower_bound(p);  // requests start inside what they move
  return it != outstanding_.end() && it->first < p + bytes;
}

CUresult Mover::ensure_resources(int device) {
  if (device < 0) return CUDA_ERROR_INVALID_DEVICE;
  if (devices_.size() <= static_cast<std::size_t>(device)) devices_.resize(static_cast<std::size_t>(device) + 1);
  DeviceResources& r = devices_[static_cast<std::size_t>(device)];
  if (r.context != nullptr && r.copy[0] != nullptr && r.copy[1] != nullptr && flag_ != nullptr) return CUDA_SUCCESS;
  streams_.keep_retiring();  // from now on destroyed streams' queued work is waited for
  if (r.context == nullptr) {
    CUdevice dev = 0;
    CUresult s = d_.cuDeviceGet(&dev, device);
    if (s == CUDA_SUCCESS) s = d_.cuDevicePrimaryCtxRetain(&r.context, dev);
    if (s != CUDA_SUCCESS) {
      r.context = nullptr;
      return s;
    }
  }
  ContextScope in(d_, r.context);
  if (in.status() != CUDA_SUCCESS) return in.status();
  for (CUstream& c : r.copy) {
    if (c != nullptr) continue;
    if (const CUresult s = d_.cuStreamCreate(&c, CU_STREAM_NON_BLOCKING); s != CUDA_SUCCESS) {
      c = nullptr;
      return s;
    }
  }
  if (flag_ == nullptr) {
    // Pinned, portable (every context's streams wait on it) and mapped for the devices.
    void* p = nullptr;
    CUresult s = d_.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (s != CUDA_SUCCESS) return s;
    s = d_.cuMemHostGetDevicePointer_v2(&flag_device_, p, 0);
    if (s != CUDA_SUCCESS) {
      d_.cuMemFreeHost(p);
      return s;
    }
    flag_ = static_cast<volatile std::uint32_t*>(p);
    __atomic_store_n(flag_, epoch_, __ATOMIC_RELEASE);
    flag_device_seen_.store(flag_device_, std::memory_order_release);
    flag_host_seen_.store(flag_, std::memory_order_release);
    breaker_.set_flag(flag_);
    breaker_.set_gate(&streams_.host_waits());
  }
  return CUDA_SUCCESS;
}

bool Mover::record_on_streams(bool gate, std::uint32_t value, Held* held) {
  held->frees_before = pool::Pool::free_mark();
  // A pool path waiting for the device now would never see its wait end behind this hold.
  if (gate && !breaker_.may_hold(value, gate_opens_)) return false;
  // A hold is an event and then a wait on each stream: work another thread queued between the two
  // would run on, unseen by the event, while the commit remaps its memory (the simulator's race
  // detector caught a copy so; on an H200 a kernel hit the unmapped range, error 700). The program's
  // launches, copies and memsets wait at the submission gate meanwhile (host_wait_gate.h).
  if (gate && !streams_.submissions().close(config_.gate_patience)) {
    log::debug("tiering: a launch of the program stayed in the driver; the hold is put off");
    return false;
  }
  struct Reopen {
    HostWaitGate* gate;
    ~Reopen() {
      if (gate != nullptr) gate->open();
    }
  } reopen{gate ? &streams_.submissions() : nullptr};
  std::vector<CUcontext> gone;
  const CUdeviceptr flag = flag_device_;
  const bool recorded = streams_.with_targets([&](const std::vector<StreamRegistry::Target>& targets,
                                                  StreamRegistry::Hold& hold,
                                                  std::vector<StreamRegistry::Retiring>& retiring) {
    // Destroyed streams whose queued work may still run: waited for like the listed streams' (their
    // later work cannot exist), then forgotten once complete.
    std::erase_if(retiring, [&](StreamRegistry::Retiring& r) {
      ContextScope in(d_, r.context);
      const CUresult q = in.status() == CUDA_SUCCESS ? d_.cuEventQuery(r.event) : in.status();
      if (q == CUDA_ERROR_NOT_READY) {
        ++r.lent;  // given back by wait_for or forget
        held->events.push_back({r.context, r.event, false});
        return false;
      }
      if (r.lent != 0) return false;  // complete, but an earlier hold still has it
      d_.cuEventDestroy_v2(r.event);
      return true;
    });
    // A capture forbids work on the legacy stream, and ours would be recorded into the graph: put off.
    for (const StreamRegistry::Target& t : targets) {
      ContextScope in(d_, t.context);
      if (in.status() == CUDA_SUCCESS && capturing(d_, t.stream)) return false;
    }
    // From here on a stream made by the program waits for this hold too (StreamRegistry::created).
    if (gate) hold = {flag, value};
    for (const StreamRegistry::Target& t : targets) {
      if (!t.fence) continue;
      ContextScope in(d_, t.context);
      if (context_gone(in.status())) {
        gone.push_back(t.context);  // its work is gone with it
        continue;
      }
      CUevent e = nullptr;
      CUresult r = in.status();
      if (r == CUDA_SUCCESS) r = d_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
      if (r == CUDA_SUCCESS) r = d_.cuEventRecord(e, t.stream);
      if (r == CUDA_SUCCESS) held->events.push_back({t.context, e});
      if (r == CUDA_SUCCESS && gate && config_.between_event_and_wait) config_.between_event_and_wait();
      if (r == CUDA_SUCCESS && gate)
        r = d_.cuStreamWaitValue32_v2(t.stream, flag, value, CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) {
        if (e != nullptr && (held->events.empty() || held->events.back().event != e)) d_.cuEventDestroy_v2(e);
        if (context_gone(r)) {
          gone.push_back(t.context);
          continue;
        }
        log::warn("tiering: a stream of the program refused the mover's {} (error {}); the moves wait",
                  gate ? "hold" : "fence", static_cast<int>(r));
        return false;
      }
    }
    return true;
  });
  for (CUcontext c : gone) streams_.forget_context(c);
  return recorded;
}

bool Mover::wait_for(Held* held) {
  bool all = true;
  for (const Held::Recorded& e : held->events) {
    ContextScope in(d_, e.context);
    const CUresult r = d_.cuEventSynchronize(e.event);
    if (e.owned) {
      d_.cuEventDestroy_v2(e.event);
    } else {
      streams_.returned(e.event);
    }
    if (r != CUDA_SUCCESS && !context_gone(r)) {
      log::warn("tiering: waiting for the program's work before a move failed (error {}); the moves are dropped",
                static_cast<int>(r));
      all = false;
    }
  }
  held->events.clear();
  return all;
}

void Mover::forget(Held* held) {
  for (const Held::Recorded& e : held->events) {
    if (!e.owned) {
      streams_.returned(e.event);
      continue;
    }
    ContextScope in(d_, e.context);
    d_.cuEventDestroy_v2(e.event);  // released by the driver once its work is done
  }
  held->events.clear();
}

// The hold's watchdog: if the hold is not over within the hold timeout (the program's earlier work does
// not drain, or the mover's copies wait behind the hold), it writes the flag, so the held work goes on
// and whatever waits for it ends, and the epoch commits nothing more. A remap keeps it from firing
// (hold_off .. allow): the held work must never run while a mapping changes.
class Mover::Watchdog {
 public:
  // `flag`: the mover's (read by the caller, under the epoch's lock).
  Watchdog(Mover& mover, volatile std::uint32_t* flag, std::uint32_t value)
      : mover_(mover), flag_(flag), value_(value), thread_([this] { run(); }) {}
  ~Watchdog() { stop(); }
  // Ends the watch; true when the hold was given up.
  bool stop() {
    {
      std::lock_guard lock(m_);
      done_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    return gave_up_;
  }
  // Before a remap under the hold: an empty lock when the hold was given up already (nothing more
  // may be remapped); else the watchdog cannot fire while the returned lock is held.
  std::unique_lock<std::mutex> hold_off() {
    std::unique_lock fire(fire_mu_);
    if (gave_up_) fire.unlock();
    return fire;
  }
  bool fired() {
    std::lock_guard fire(fire_mu_);
    return gave_up_;
  }
  // After the last remap: the watchdog no longer fires (the epoch's release follows).
  void disarm() {
    std::lock_guard fire(fire_mu_);
    disarmed_ = true;
  }

 private:
  void run() {
    std::unique_lock lock(m_);
    std::uint64_t passed = mover_.progress_.passed();
    do {
      if (cv_.wait_for(lock, mover_.config_.hold_timeout, [&] { return done_; })) return;
    } while (mover_.still_progressing(&passed));
    lock.unlock();  // stop() takes m_ while a remap may hold fire_mu_
    {
      std::lock_guard fire(fire_mu_);
      if (disarmed_) return;
      gave_up_ = true;
      raise_flag(flag_, value_);
    }
    mover_.note_given_up();
  }

  Mover& mover_;
  volatile std::uint32_t* const flag_;
  const std::uint32_t value_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;     // m_
  std::mutex fire_mu_;    // held across a remap (hold_off); the thread takes it to give the hold up
  bool gave_up_ = false;  // fire_mu_; written by the thread before it ends, so read freely after the join
  bool disarmed_ = false;  // fire_mu_
  std::thread thread_;    // last: it starts once the fields above exist
};

bool Mover::still_progressing(std::uint64_t* passed) {
  const std::uint64_t now = progress_.passed();
  if (now <= *passed) return false;
  *passed = now;
  extended_.fetch_add(1, std::memory_order_relaxed);
  // Nor is the mover stuck: the stall guard's clock starts again (a standing hold's only).
  std::int64_t since = oldest_hold_ns_.load(std::memory_order_acquire);
  if (since != 0)
    oldest_hold_ns_.compare_exchange_strong(since, steady_ns(std::chrono::steady_clock::now()),
                                            std::memory_order_acq_rel);
  return true;
}

void Mover::note_given_up() {
  // What the GPU runs showed too little of (docs/gpu-results.md, row 7 with epochs prepared at the
  // hold): how far the program was ahead of the device, and whether its calls waited at the gate.
  log::warn("tiering: the program's work did not drain within {} ms of a hold; the hold is given up, nothing moves "
            "(the mover {}; {} holds standing, mark {} passed, {} launches outstanding, {} calls waiting at the gate)",
            config_.hold_timeout.count(), step_name(step_.load(std::memory_order_acquire)),
            standing_.load(std::memory_order_relaxed), progress_.passed(),
            progress_.outstanding(), streams_.host_waits().waiters());
  count_given_up();
}

void Mover::count_given_up() {
  if (given_up_.fetch_add(1, std::memory_order_relaxed) + 1 == kMaxHoldsGivenUp) {
    off_.store(true, std::memory_order_relaxed);
    log::warn("tiering: {} holds could not drain (work queued before a hold waits for work queued after it); "
              "moves are off for this process, memory stays where it is",
              kMaxHoldsGivenUp);
  }
}

void Mover::release(std::uint32_t value) {
  // Later holds still standing (holds ahead): new streams keep waiting for the last of them, and the
  // gate stays closed until it is released too.
  const bool last = placed_.empty();
  if (last) streams_.end_hold();
  raise_flag(flag_, value);
  // The stall guard's clock: stopped with the last hold, else started again for the next.
  oldest_hold_ns_.store(last ? 0 : steady_ns(std::chrono::steady_clock::now()), std::memory_order_release);
  if (last) streams_.host_waits().open();  // after the flag: what waited at the gate now finds its stream going
  // The held streams go on as the devices see the flag. A query lets a driver that looks for written
  // values only on calls (the simulator) see it too.
  for (const DeviceResources& r : devices_) {
    if (r.copy[0] == nullptr) continue;
    ContextScope in(d_, r.context);
    d_.cuStreamQuery(r.copy[0]);
    break;
  }
}

CUresult Mover::enqueue_copies(const Held* after, bool mark, std::uint64_t frees_before) {
  Epoch& e = epoch_state_;
  DeviceResources& res = devices_[static_cast<std::size_t>(e.device)];
  ContextScope in(d_, res.context);
  if (in.status() != CUDA_SUCCESS) return in.status();
  if (after != nullptr) {
    for (const Held::Recorded& f : after->events) {
      for (CUstream c : res.copy) {
        if (const CUresult r = d_.cuStreamWaitEvent(c, f.event, 0); r != CUDA_SUCCESS) return r;
      }
    }
  }
  e.copy_done.assign(mark ? e.moves.size() : 0, nullptr);
  for (std::size_t i = 0; i < e.moves.size(); ++i) {
    const CUstream stream = res.copy[direction(e.moves[i].to)];
    e.copied[i] = pool_.copy_move(e.moves[i], stream, frees_before) == CUDA_SUCCESS;
    if (!mark || !e.copied[i]) continue;
    if (res.copy_events.size() == i) {
      CUevent ev = nullptr;
      if (d_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) res.copy_events.push_back(ev);
    }
    // Without its event the move's copy is known done only once all are (Mover::finish).
    if (res.copy_events.size() > i && d_.cuEventRecord(res.copy_events[i], stream) == CUDA_SUCCESS)
      e.copy_done[i] = res.copy_events[i];
  }
  return CUDA_SUCCESS;
}

bool Mover::copies_done(bool wait) {
  Epoch& e = epoch_state_;
  const DeviceResources& res = devices_[static_cast<std::size_t>(e.device)];
  ContextScope in(d_, res.context);
  if (!wait) {
    bool pending = false, failed = false;
    for (CUstream c : res.copy) {
      const CUresult r = d_.cuStreamQuery(c);
      pending |= r == CUDA_ERROR_NOT_READY;
      failed |= r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY;
    }
    if (pending && !failed) return false;
    if (!failed) return true;
  }
  // The staging mappings may be dropped only once no copy writes them any more: a failed wait is
  // asked again (a copy that really failed keeps failing: stream errors are sticky).
  bool ok = true;
  for (CUstream c : res.copy) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    for (int attempt = 0; attempt < 3 && r != CUDA_SUCCESS; ++attempt) r = d_.cuStreamSynchronize(c);
    if (r != CUDA_SUCCESS) {
      log::error("tiering: waiting for the mover's copies failed (error {}); the moves are dropped", static_cast<int>(r));
      ok = false;
    }
  }
  if (!ok) std::fill(e.copied.begin(), e.copied.end(), 0);
  return true;
}

CUresult Mover::put_off(const std::vector<Request>& requests) {
  postponed_.fetch_add(1, std::memory_order_relaxed);
  // A stream that keeps refusing (or a capture that never ends) must not keep the mover busy
  // forever: after kMaxPutOffs epochs in a row put off, the batch is dropped.
  if (++put_offs_ >= kMaxPutOffs) {
    put_offs_ = 0;
    failed_.fetch_add(requests.size(), std::memory_order_relaxed);
    settle(requests);
    log::warn("tiering: {} moves dropped after {} epochs put off in a row (a graph capture, a stream refusing the hold, "
              "or a copy of the program staying in the driver)",
              requests.size(), kMaxPutOffs);
    return CUDA_SUCCESS;
  }
  put_back(requests);
  return CUDA_ERROR_NOT_READY;
}

bool Mover::capture_in_progress() {
  return streams_.with_targets([&](const std::vector<StreamRegistry::Target>& targets, StreamRegistry::Hold&,
                                   std::vector<StreamRegistry::Retiring>&) {
    for (const StreamRegistry::Target& t : targets) {
      ContextScope in(d_, t.context);
      if (in.status() == CUDA_SUCCESS && capturing(d_, t.stream)) return true;
    }
    return false;
  });
}

void Mover::put_back(const std::vector<Request>& requests) {
  MutexLock lock(queue_mu_);
  queue_.insert(queue_.begin(), requests.begin(), requests.end());
  queued_.store(!queue_.empty(), std::memory_order_relaxed);
}

CUresult Mover::begin() {
  const CUresult r = prepare_epoch();
  // Nothing begun (nothing queued, all refused, put off): the mover waits for holds or for requests.
  if (!epoch_state_.active) set_step(placed_.empty() ? MoverStep::Idle : MoverStep::Draining);
  return r;
}

CUresult Mover::prepare_epoch() {
  std::vector<Request> batch;
  if (!take_batch(&batch)) return CUDA_SUCCESS;
  set_step(MoverStep::Preparing);
  // Nothing is prepared (mapped) while a graph is captured: VMM calls may invalidate a capture.
  if (capture_in_progress()) return put_off(batch);
  Epoch& e = epoch_state_;
  e = Epoch{};
  std::vector<Request> later;
  prepare_requests(std::move(batch), false, &later);
  put_back(later);
  if (e.moves.empty()) return CUDA_SUCCESS;
  return start_epoch();
}

bool Mover::demotes(const Epoch& e) {
  const auto down = [](const Request& r) { return r.to == pool::Tier::Host; };
  return std::any_of(e.taken.begin(), e.taken.end(), down) || std::any_of(e.waiting.begin(), e.waiting.end(), down);
}

void Mover::prepare_requests(std::vector<Request> batch, bool held, std::vector<Request>* later) {
  Epoch& e = epoch_state_;
  // Prepared, one device per epoch (the first request's); requests for another wait for the next.
  // Demotions first: a promotion refused for room while some are under way waits for the next epoch,
  // where their room is free.
  std::stable_partition(batch.begin(), batch.end(), [](const Request& r) { return r.to == pool::Tier::Host; });
  bool demoting = false;
  // Holds ahead: demotions of epochs still standing make their room when those commit.
  const bool standing_demotions = std::any_of(placed_.begin(), placed_.end(), [](const Placed& p) { return demotes(p.epoch); });
  bool queued_demotions = false;  // left for a later epoch (the batch was full)
  {
    MutexLock lock(queue_mu_);
    queued_demotions = std::any_of(queue_.begin(), queue_.end(), [](const Request& r) { return r.to == pool::Tier::Host; });
  }
  // The least promotion the pool refused for room in this batch, by device: nothing commits while the
  // batch is prepared, so one at least as large on the same device is refused too, without asking.
  // (Row 4b on an H200 logged about 20000 such refusals a step while its first moves ramped up, each
  // a placement tried for nothing: docs/gpu-results.md, thirty-sixth session.) The device is looked
  // up only once a refusal was seen.
  std::vector<std::pair<int, std::size_t>> least_refused;  // (device, bytes)
  const auto device_of = [this](CUdeviceptr p) {
    const std::optional<pool::AllocationInfo> info = pool_.find(p);
    return info ? info->device : -1;
  };
  const auto refused_before = [&](CUdeviceptr p, std::size_t bytes) {
    if (least_refused.empty()) return false;
    const int device = device_of(p);
    return std::any_of(least_refused.begin(), least_refused.end(),
                       [&](const auto& r) { return r.first == device && bytes >= r.second; });
  };
  for (const Request& r : batch) {
    // Prepared at the hold, a request names the whole range asked for: its pieces not in the tier
    // asked, each run of them one move (the pool moves one tier at a time).
    const std::vector<Range> runs = held ? runs_to_move(r) : std::vector<Range>{{r.address, r.bytes}};
    std::vector<pool::Move> prepared;
    CUresult s = CUDA_SUCCESS;
    bool other_device = false;
    for (const Range& run : runs) {
      if (r.to == pool::Tier::Device && refused_before(run.first, run.second)) {
        s = CUDA_ERROR_OUT_OF_MEMORY;
        break;
      }
      pool::Move m;
      // Never waiting for the device here (pool.h, MoveWaits): the program's queued work can take half a
      // step, and with holds standing the wait would release them.
      s = pool_.prepare_move(run.first, run.second, r.to, &m, pool::MoveWaits::NoWait);
      if (s == CUDA_ERROR_OUT_OF_MEMORY && !held && placed_.empty() && pool_.fence_due()) {
        // The room may lie in idle mappings behind a fence. With no hold standing the fence is made
        // here, as an allocation taking that memory would make it, and the move asked for again.
        set_step(MoverStep::Fencing);
        pool_.fence_freed();
        set_step(MoverStep::Preparing);
        s = pool_.prepare_move(run.first, run.second, r.to, &m, pool::MoveWaits::NoWait);
      }
      if (s == CUDA_ERROR_OUT_OF_MEMORY) {  // the request waits or goes whole (below)
        if (r.to == pool::Tier::Device) {
          const int device = device_of(run.first);
          const auto it = std::find_if(least_refused.begin(), least_refused.end(), [&](const auto& x) { return x.first == device; });
          if (it == least_refused.end()) {
            least_refused.emplace_back(device, run.second);
          } else {
            it->second = std::min(it->second, run.second);
          }
        }
        break;
      }
      if (s != CUDA_SUCCESS) {
        // A move is an optimization: a refused one (being freed, moving already) is dropped.
        failed_.fetch_add(1, std::memory_order_relaxed);
        log::debug("tiering: a move of {} bytes at {:#x} refused by the pool ({})", run.second, run.first, static_cast<int>(s));
        continue;
      }
      if (m.staging == 0) continue;  // there already
      if ((e.device >= 0 && m.device != e.device) || (!prepared.empty() && m.device != prepared.front().device)) {
        pool_.abort_move(&m);
        other_device = true;
        break;
      }
      prepared.push_back(std::move(m));
    }
    if (s == CUDA_ERROR_OUT_OF_MEMORY || other_device) {
      for (pool::Move& m : prepared) pool_.abort_move(&m);
      prepared.clear();
    }
    if (other_device) {
      later->push_back(r);
      continue;
    }
    if (s == CUDA_ERROR_OUT_OF_MEMORY && r.to == pool::Tier::Device) {
      if (standing_demotions) {
        later->push_back(r);  // for as long as those stand: each commits or is given up
        continue;
      }
      if ((demoting || queued_demotions) && r.room_waits < kMaxRoomWaits) {
        later->push_back(r);
        ++later->back().room_waits;  // a few epochs: refused again after that, it is dropped like any refusal
        continue;
      }
    }
    if (s == CUDA_ERROR_OUT_OF_MEMORY) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      log::debug("tiering: a move of {} bytes at {:#x} refused by the pool (no room)", r.bytes, r.address);
    }
    if (prepared.empty()) {  // there already, or refused
      settle(r);
      continue;
    }
    if (e.device < 0) e.device = prepared.front().device;
    demoting |= r.to == pool::Tier::Host;
    for (pool::Move& m : prepared) {
      trace_move(trace::Kind::MoveBegin, m);
      e.moves.push_back(std::move(m));
    }
    e.taken.push_back(r);
  }
}

std::vector<Mover::Range> Mover::runs_to_move(const Request& r) const {
  // The pieces that must move lie in the other tier.
  return pool_.runs_in_tier(r.address, r.address + r.bytes, r.to == pool::Tier::Device ? pool::Tier::Host : pool::Tier::Device);
}

CUresult Mover::start_epoch() {
  Epoch& e = epoch_state_;
  if (const CUresult s = ensure_resources(e.device); s != CUDA_SUCCESS) {
    log::warn("tiering: the mover could not set up on device {} (error {}); {} moves dropped", e.device,
              static_cast<int>(s), e.moves.size());
    failed_.fetch_add(e.moves.size(), std::memory_order_relaxed);
    settle(e.taken);
    abort_all();
    return s;
  }
  // The contexts the memory was made in run the program's work: their default streams are fenced,
  // as is the device's primary context's (the runtime's, which most programs use).
  streams_.saw_context(devices_[static_cast<std::size_t>(e.device)].context);
  for (const pool::Move& m : e.moves) {
    if (const auto info = pool_.find(m.address)) streams_.saw_context(info->context);
  }
  e.copied.assign(e.moves.size(), 0);
  e.active = true;
  return CUDA_SUCCESS;  // copied under the hold (finish), or behind a fence (place_ordered)
}

void Mover::abort_all() {
  Epoch& e = epoch_state_;
  for (pool::Move& m : e.moves) {
    trace_move(trace::Kind::MoveDropped, m);
    pool_.abort_move(&m);
  }
  e = Epoch{};
}

CUresult Mover::finish(Placed* placed) {
  Epoch& e = epoch_state_;
  const std::uint32_t value = placed != nullptr ? placed->value : epoch_ + 1;
  bool held_off = false;
  std::chrono::steady_clock::time_point held_at{};
  std::uint64_t held_tick = 0;  // the trace's clock, for the Hold slice
  // No call of the program may wait inside the driver behind the hold: the driver would make this
  // thread's calls wait for it (host_wait_gate.h). Closed before the pool's lock is taken, since the
  // calls still inside may take up to the hold timeout to return; if they do not, the epoch is put off.
  // release() opens it again, whatever happens below.
  if (placed == nullptr) {
    set_step(MoverStep::ClosingGate);
    gate_opens_ = breaker_.gate_opens();
  }
  const bool gate_closed = placed != nullptr ? placed->standing : streams_.host_waits().close(config_.hold_timeout);
  std::unique_lock<std::mutex> window;  // the breaker's commit window (open_commit), closed after the commit
  bool remaps_closed = false;           // the remap gate, closed for the commit's remaps
  // Held copies are pipelined with the remaps (unless UVMPOOL_TIERING_COMMIT=after): the copies are
  // enqueued under the hold and each move commits as soon as its own copy is done (`ready` below), so
  // the remaps of the first moves run beside the copies of the later ones and the hold lasts about the
  // longer of the two, not their sum. The
  // watchdog then stands until the last commit, kept from firing during each remap, and the breaker's
  // commit window is opened for each remap alone (never across a wait for the device).
  std::optional<Watchdog> watchdog;
  std::unique_lock<std::mutex> remap_permit;  // watchdog->hold_off(), for the remap under way; after `watchdog`
  bool pipelined = false;                     // copies still running when quiesce returns
  // The commit order: by when each copy should end (bytes queued before it in its direction), so the
  // two directions' commits interleave as their copies finish. The pool sees the moves in this order:
  // its k-th move, its commit[k] and results[k] are e.moves[order[k]].
  std::vector<std::size_t> order(e.moves.size());
  {
    std::vector<std::uint64_t> ends(e.moves.size());
    std::uint64_t queued[2] = {0, 0};
    for (std::size_t i = 0; i < e.moves.size(); ++i) {
      order[i] = i;
      ends[i] = queued[direction(e.moves[i].to)] += e.moves[i].bytes;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ends[a] < ends[b]; });
  }
  // The hold and its drain, before the pool's lock is taken: the drain waits for the program's work
  // queued before the hold, and that work may wait for whatever a program thread does next, a free
  // that takes the pool's lock included (free_while_moving). Held across the drain, the lock made the
  // two wait for each other for good; no watchdog helped, since it releases only the hold, not the
  // work before it (`Mover_.AFreeDuringTheDrainOfAHoldDoesNotWaitForIt`). A pool path that waits for
  // the device meanwhile breaks the hold instead (hold_breaker.h), and the epoch then commits nothing.
  Held hold;
  bool drained_ok = false;
  if (placed != nullptr && (!gate_closed || placed->given_up)) {
    // A partial hold (a stream refused it), or one given up: its work may never drain; nothing waits.
    held_off = !gate_closed;
    forget(&placed->hold);
  } else if (!gate_closed) {
    held_off = true;
  } else {
    set_step(MoverStep::Draining);
    held_at = std::chrono::steady_clock::now();
    if (trace::recording()) held_tick = trace::now();
    // Bounded from here to the end of the held copies: the drain, the wait for the pool's lock, and
    // the copies, which a lazily loaded kernel can make wait behind the hold (host_wait_gate.h),
    // pipelined copies included up to the last commit. Never a remap itself (hold_off): releasing the
    // hold during one would break the invariant, so only the gate keeps calls that wait inside the
    // driver away from them.
    watchdog.emplace(*this, flag_, value);
    if (placed != nullptr) {
      hold = std::move(placed->hold);  // drained already (drained()): the wait below returns at once
      drained_ok = true;
    } else if (!record_on_streams(true, value, &hold)) {
      held_off = true;
      wait_for(&hold);
    } else {
      drained_ok = true;
    }
    if (drained_ok) {
      if (config_.inside_hold) config_.inside_hold();
      drained_ok = wait_for(&hold);
    }
  }
  // Called by the pool under its lock, inside this epoch (epoch_mu_ held throughout).
  const pool::Quiesce quiesce = [&](std::span<char> commit) UVMPOOL_REQUIRES(epoch_mu_) {
    if (!drained_ok) return false;
    if (breaker_.broken(value)) return false;  // released for a pool wait: the streams ran on; no copy
    if (watchdog->fired()) return false;       // given up while draining: no copy goes
    set_step(MoverStep::Copying);
    const bool enqueued = enqueue_copies(nullptr, true, hold.frees_before) == CUDA_SUCCESS;
    if (!enqueued) std::fill(e.copied.begin(), e.copied.end(), 0);
    // A move whose copy did not all go, or that has no event, is known done only once every copy
    // is: then they are all waited for here, as before pipelining.
    pipelined = enqueued && config_.commit_beside_copies;
    for (std::size_t i = 0; i < e.moves.size(); ++i) pipelined &= e.copied[i] != 0 && e.copy_done[i] != nullptr;
    if (!pipelined) copies_done(true);
    for (std::size_t k = 0; k < order.size(); ++k) commit[k] = e.copied[order[k]];
    // From here on, a `false` while copies may run waits for them first: an aborted move's staging
    // pieces go back to the pool.
    const auto stop_here = [&]() UVMPOOL_REQUIRES(epoch_mu_) {
      if (pipelined) copies_done(true);
      return false;
    };
    if (!pipelined && watchdog->stop()) return false;
    // The program's copies and memsets stay out of the driver during the remaps (the remap gate,
    // host_wait_gate.h; launches pass: a kernel's pointers are read when it runs): the driver resolves
    // their addresses when they are called, and one called while its range is unmapped is refused
    // (INVALID_VALUE) or, for cuMemcpyAsync, waits for the held work and breaks the context (H200,
    // tests/gpu/remap_enqueue.py). Calls already inside are only queueing work behind the hold; one
    // that stays (waiting for queue room) keeps the remaps off: nothing commits.
    set_step(MoverStep::ClosingGate);
    if (!streams_.remaps().close(config_.gate_patience)) return stop_here();
    remaps_closed = true;
    // No break passes during a remap: the breaker's window is held from here to the end of the remaps
    // (after commit_quiesced), or, pipelined, for each remap alone (ready). One that came before
    // means the streams ran on, and nothing (more) commits.
    set_step(MoverStep::Committing);
    if (pipelined) return !breaker_.broken(value) || stop_here();  // the window opens for each remap (ready)
    return breaker_.open_commit(value, &window) || stop_here();
  };
  // Pipelined: before the pool commits its k-th move, that move's copy is waited for, then the
  // watchdog is kept from firing and the breaker's window opened, for its remap alone.
  const pool::CopyReady ready = [&](std::size_t k) UVMPOOL_REQUIRES(epoch_mu_) {
    if (!pipelined) return true;  // every copy was waited for in quiesce
    if (window.owns_lock()) window.unlock();
    if (remap_permit.owns_lock()) remap_permit.unlock();
    set_step(MoverStep::Copying);
    CUresult r = CUDA_ERROR_UNKNOWN;
    {
      ContextScope in(d_, devices_[static_cast<std::size_t>(e.device)].context);
      for (int attempt = 0; attempt < 3 && r != CUDA_SUCCESS; ++attempt) r = d_.cuEventSynchronize(e.copy_done[order[k]]);
    }
    if (r == CUDA_SUCCESS) remap_permit = watchdog->hold_off();
    if (remap_permit.owns_lock() && breaker_.open_commit(value, &window)) {
      set_step(MoverStep::Committing);
      return true;
    }
    if (remap_permit.owns_lock()) remap_permit.unlock();
    copies_done(true);  // the rest is aborted: no copy may still write a staging piece then
    return false;
  };
  std::vector<pool::Move*> pointers;
  for (std::size_t i : order) pointers.push_back(&e.moves[i]);
  std::vector<CUresult> in_order(e.moves.size(), CUDA_ERROR_NOT_READY);
  if (drained_ok) set_step(MoverStep::WaitingForPool);
  pool_.commit_quiesced(e.device, pointers, quiesce, in_order, ready);
  if (pipelined) {
    if (window.owns_lock()) window.unlock();
    if (remap_permit.owns_lock()) remap_permit.unlock();
    watchdog->disarm();  // all remaps done: a timeout now would release nothing that is not released below
    copies_done(true);   // done by now: each was waited for, or all were before an abort
  }
  if (watchdog) watchdog->stop();
  std::vector<CUresult> results(e.moves.size(), CUDA_ERROR_NOT_READY);
  for (std::size_t k = 0; k < order.size(); ++k) results[order[k]] = in_order[k];
  if (remaps_closed) streams_.remaps().open();
  if (window.owns_lock()) window.unlock();
  set_step(MoverStep::Idle);
  if (placed == nullptr) epoch_ = value;
  release(value);  // always: a hold may stand on some streams even when quiesce failed half-way
  if (held_at != std::chrono::steady_clock::time_point{}) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - held_at);
    held_ns_.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
  }
  const Epoch done = std::move(e);
  e = Epoch{};
  if (trace::recording()) {  // the hold's slice first: its start was read after every earlier event here
    std::uint64_t bytes = 0, demoted = 0;
    for (std::size_t i = 0; i < done.moves.size(); ++i) {
      if (results[i] != CUDA_SUCCESS) continue;
      bytes += done.moves[i].bytes;
      if (done.moves[i].to == pool::Tier::Host) demoted += done.moves[i].bytes;
    }
    if (held_tick != 0) trace::record(trace::Kind::Hold, done.device, 0, bytes, demoted, held_tick);
    for (std::size_t i = 0; i < done.moves.size(); ++i)
      trace_move(results[i] == CUDA_SUCCESS ? trace::Kind::Moved : trace::Kind::MoveDropped, done.moves[i]);
  }
  if (held_off) return put_off(done.taken);
  settle(done.taken);
  put_offs_ = 0;
  count_results(done, results);
  return CUDA_SUCCESS;
}

void Mover::count_results(const Epoch& done, std::span<const CUresult> results) {
  epochs_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < done.moves.size(); ++i) {
    if (results[i] == CUDA_SUCCESS) {
      moves_.fetch_add(1, std::memory_order_relaxed);
      (done.moves[i].to == pool::Tier::Device ? promoted_ : demoted_).fetch_add(done.moves[i].bytes, std::memory_order_relaxed);
    } else {
      failed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

CUresult Mover::run_epoch() {
  MutexLock epoch(epoch_mu_);
  while (!placed_.empty()) {  // holds placed ahead end first, in order
    if (const CUresult r = complete_locked(true); r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) return r;
  }
  if (ordered()) {  // one epoch, placed and completed
    if (const CUresult r = place_ordered(); r != CUDA_SUCCESS) return r;
    return complete_locked(true);
  }
  if (!epoch_state_.active) {
    if (const CUresult r = begin(); r != CUDA_SUCCESS) return r;
    if (!epoch_state_.active) return CUDA_SUCCESS;  // nothing to move
  }
  return finish();
}

CUresult Mover::poll() {
  if (!epoch_mu_.try_lock()) return CUDA_ERROR_NOT_READY;  // an epoch is under way on another thread
  const CUresult r = poll_locked();
  epoch_mu_.unlock();
  return r;
}

CUresult Mover::poll_locked() {
  if (ordered()) {  // the epochs whose copies are done commit, in order; then one more is placed
    while (!placed_.empty()) {
      if (const CUresult r = complete_locked(false); r != CUDA_SUCCESS) break;
    }
    const CUresult r = place_ordered();
    return r == CUDA_SUCCESS && placed_.empty() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  }
  if (!placed_.empty()) {  // holds placed ahead end first, in order (a later hold's release would free them)
    if (const CUresult r = complete_locked(false); r != CUDA_SUCCESS) return r;
    if (!placed_.empty()) return CUDA_ERROR_NOT_READY;
  }
  if (!epoch_state_.active) {
    if (const CUresult r = begin(); r != CUDA_SUCCESS) return r;
    if (!epoch_state_.active) return CUDA_SUCCESS;
  }
  return finish();
}

CUresult Mover::take_for_hold() {
  // Holds ahead: each move takes effect where it was asked for in the program's order, when the
  // program's work reaches its hold, up to a step after it was asked for. What lies where by then
  // depends on the epochs before it, so the batch is prepared only then (prepare_waiting), after every
  // earlier epoch committed: a promotion finds the room the demotions before it made. Prepared here,
  // it could take only the room free now, at the device's position, and would keep it for up to a
  // step. (Preparing here what no earlier epoch touches, or the demotions only, was tried: modeled
  // 132 -> 169 ms a training step, and on an H200 row 4b went from 3.6-4.0 to 5.0-9.9 s a step.)
  std::vector<Request> batch;
  if (!take_batch(&batch)) return CUDA_SUCCESS;
  set_step(MoverStep::Preparing);
  if (capture_in_progress()) return put_off(batch);
  Epoch& e = epoch_state_;
  e = Epoch{};
  std::vector<Request> later;
  std::vector<CUcontext> contexts;
  std::vector<Request> taken;
  for (const Request& r : batch) {
    const std::optional<pool::AllocationInfo> info = pool_.find(r.address);
    if (!info) {  // freed since it was asked for
      failed_.fetch_add(1, std::memory_order_relaxed);
      settle(r);
      continue;
    }
    if (e.device < 0) e.device = info->device;
    if (info->device != e.device) {
      later.push_back(r);
      continue;
    }
    contexts.push_back(info->context);
    taken.push_back(r);
  }
  put_back(later);
  if (taken.empty()) return CUDA_SUCCESS;
  // Idle device memory freed since the last fence is room only after a fence (pool.h, MoveWaits),
  // which no hold of the mover's may stand through: with none standing it is made now, as the
  // preparation itself would make it on running short (prepare_requests), for promotions to find it.
  const bool promotes = std::any_of(taken.begin(), taken.end(), [](const Request& r) { return r.to == pool::Tier::Device; });
  if (promotes && placed_.empty() && pool_.fence_due()) {
    set_step(MoverStep::Fencing);
    pool_.fence_freed();
    set_step(MoverStep::Preparing);
  }
  if (const CUresult s = ensure_resources(e.device); s != CUDA_SUCCESS) {
    log::warn("tiering: the mover could not set up on device {} (error {}); {} moves dropped", e.device,
              static_cast<int>(s), taken.size());
    failed_.fetch_add(taken.size(), std::memory_order_relaxed);
    settle(taken);
    e = Epoch{};
    return s;
  }
  // The hold must cover the contexts the memory was made in (see start_epoch).
  streams_.saw_context(devices_[static_cast<std::size_t>(e.device)].context);
  for (CUcontext c : contexts) streams_.saw_context(c);
  e.waiting = std::move(taken);
  e.active = true;
  return CUDA_SUCCESS;
}

void Mover::prepare_waiting() {
  Epoch& e = epoch_state_;
  if (e.waiting.empty()) return;
  std::vector<Request> batch = std::move(e.waiting);
  e.waiting.clear();
  const int device = e.device;
  std::vector<Request> later;
  // Nothing is mapped while a graph is captured (a capture begun after the hold was placed): the
  // requests wait for a later epoch.
  if (capture_in_progress()) {
    later = std::move(batch);
  } else {
    prepare_requests(std::move(batch), true, &later);
  }
  if (e.device < 0) e.device = device;
  e.copied.assign(e.moves.size(), 0);
  // What waits for room (or for the capture) goes with the next standing epoch, the nearest place in
  // the program's order after this one; with none standing, back to the queue.
  if (later.empty()) return;
  if (!placed_.empty() && placed_.front().epoch.device == device) {
    std::vector<Request>& next = placed_.front().epoch.waiting;
    next.insert(next.begin(), later.begin(), later.end());
  } else {
    put_back(later);
  }
}

CUresult Mover::place_epoch() {
  CUresult r = CUDA_ERROR_NOT_READY;
  {
    MutexLock epoch(epoch_mu_);
    {
      // Once stopped (the exit handler), nothing would complete a hold placed now: its flag would
      // never be written. Read under epoch_mu_: the thread gives up what stands under it as it ends.
      MutexLock lock(queue_mu_);
      if (stopping_) return CUDA_ERROR_NOT_READY;
    }
    r = place_locked();
  }
  // The mover's thread completes what the launching thread places (ordered epochs); asleep with
  // nothing queued, it would not look until the next request.
  if (standing_.load(std::memory_order_relaxed) != 0) {
    { MutexLock lock(queue_mu_); }
    queue_cv_.notify_all();
  }
  return r;
}

CUresult Mover::complete_placed(bool wait) {
  MutexLock epoch(epoch_mu_);
  return complete_locked(wait);
}

CUresult Mover::place_locked() {
  if (ordered()) return place_ordered();
  if (placed_.size() >= std::max<std::size_t>(config_.holds_ahead, 1)) return CUDA_ERROR_NOT_READY;
  // The gate stays open a while after a close that found calls staying inside (below).
  if (placed_.empty() && !epoch_state_.active && std::chrono::steady_clock::now() < gate_retry_at_)
    return CUDA_ERROR_NOT_READY;
  if (!epoch_state_.active) {
    if (const CUresult r = prepares_at_hold() ? take_for_hold() : begin(); r != CUDA_SUCCESS) return r;
    if (!epoch_state_.active) return CUDA_SUCCESS;  // nothing to move
  }
  Epoch& e = epoch_state_;
  // The first hold closes the gate (waiting for the program's calls inside the driver, as finish()
  // does); later ones find it closed, and it stays so until the last standing hold is released. While
  // it closes, the program's other such calls wait at it; a call that stays inside longer than the
  // gate's patience waits for work that may need them (under DDP, another rank's collective, whose
  // launch waits at that rank's closed gate): the epoch is put off and the gate left open a while,
  // from 10 ms, doubling up to 200 ms, so the program is never stopped for long at the gate.
  // Closed again too after a release opened it (hold_breaker.h) while released epochs still stand.
  if (!close_gate_for_epoch()) {
    std::vector<Request> taken = e.taken;  // abort_all forgets the epoch
    taken.insert(taken.end(), e.waiting.begin(), e.waiting.end());
    abort_all();
    return put_off(taken);
  }
  Placed p;
  p.value = ++epoch_;
  p.standing = record_on_streams(true, p.value, &p.hold);
  if (!p.standing && placed_.empty()) {  // nothing earlier stands: released now, as finish() would
    // Not waited for first: with no watchdog here, work on a stream that took the partial hold may
    // wait for work behind it (a value the program writes later), and nothing was copied to drain.
    release(p.value);
    forget(&p.hold);
    std::vector<Request> taken = e.taken;
    taken.insert(taken.end(), e.waiting.begin(), e.waiting.end());
    abort_all();
    return put_off(taken);
  }
  // A stream that refused behind earlier holds: this one's partial hold is released in its turn.
  p.epoch = std::move(e);
  e = Epoch{};
  if (placed_.empty()) {
    p.first_since = std::chrono::steady_clock::now();
    p.marks_passed = progress_.passed();
    std::int64_t none = 0;  // the stall guard's clock starts with the first standing hold
    oldest_hold_ns_.compare_exchange_strong(none, steady_ns(p.first_since), std::memory_order_acq_rel);
  }
  placed_.push_back(std::move(p));
  standing_.store(placed_.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

bool Mover::close_gate_for_epoch() {
  if (!placed_.empty() && streams_.host_waits().closed()) return true;
  set_step(MoverStep::ClosingGate);
  gate_opens_ = breaker_.gate_opens();
  if (!streams_.host_waits().close(std::min(config_.gate_patience, config_.hold_timeout))) {
    gate_backoff_ = std::clamp(2 * gate_backoff_, kMinGateBackoff, kMaxGateBackoff);
    gate_retry_at_ = std::chrono::steady_clock::now() + gate_backoff_;
    return false;
  }
  gate_backoff_ = std::chrono::milliseconds(0);
  return true;
}

bool Mover::drained(Placed& p) {
  for (const Held::Recorded& r : p.hold.events) {
    ContextScope in(d_, r.context);
    if (d_.cuEventQuery(r.event) == CUDA_ERROR_NOT_READY) return false;  // an error ends the wait (wait_for logs it)
  }
  return true;
}

CUresult Mover::complete_locked(bool wait) {
  if (placed_.empty()) return CUDA_SUCCESS;
  if (ordered()) return complete_ordered(wait);
  Placed& first = placed_.front();
  // Released already (for a pool wait, or by the stall guard): nothing of it commits, nothing to wait for.
  if (first.standing && !first.given_up && breaker_.broken(first.value)) first.given_up = true;
  if (first.standing && !first.given_up && !drained(first)) {
    set_step(MoverStep::Draining);
    if (!wait) {
      if (std::chrono::steady_clock::now() - first.first_since < config_.hold_timeout) return CUDA_ERROR_NOT_READY;
      if (still_progressing(&first.marks_passed)) {  // a busy device, not a stuck hold: another timeout
        first.first_since = std::chrono::steady_clock::now();
        return CUDA_ERROR_NOT_READY;
      }
      // As the watchdog does: the held work goes on, nothing of this epoch commits.
      first.given_up = true;
      raise_flag(flag_, first.value);
      note_given_up();
    } else {
      // Waited for under the watchdog (which gives the hold up after the hold timeout), as finish() does.
      Watchdog watchdog(*this, flag_, first.value);
      for (const Held::Recorded& r : first.hold.events) {
        ContextScope in(d_, r.context);
        d_.cuEventSynchronize(r.event);  // an error ends the wait (wait_for logs it at the commit)
      }
      first.given_up = watchdog.stop();
    }
  }
  Placed p = pop_placed();
  epoch_state_ = std::move(p.epoch);
  Epoch& e = epoch_state_;
  if (!p.standing && !e.waiting.empty()) {  // a stream refused the hold: tried again later, as finish() does
    std::vector<Request> waiting = std::move(e.waiting);
    e.waiting.clear();
    put_off(waiting);
  } else if (p.given_up) {  // nothing of it commits: what waited is dropped with it
    failed_.fetch_add(e.waiting.size(), std::memory_order_relaxed);
    settle(e.waiting);
    e.waiting.clear();
  }
  prepare_waiting();
  if (e.moves.empty()) {
    // Nothing to copy or commit: the hold is released in its turn (a later hold's value would
    // release it anyway); what was refused was settled, what waits for room went on.
    forget(&p.hold);
    release(p.value);
    settle(e.taken);
    e = Epoch{};
    set_step(placed_.empty() ? MoverStep::Idle : MoverStep::Draining);
    return CUDA_SUCCESS;
  }
  return finish(&p);
}

Mover::Placed Mover::pop_placed() {
  Placed p = std::move(placed_.front());
  placed_.pop_front();
  standing_.store(placed_.size(), std::memory_order_relaxed);
  if (!placed_.empty()) {
    placed_.front().first_since = std::chrono::steady_clock::now();
    placed_.front().marks_passed = progress_.passed();
  }
  return p;
}

void Mover::give_up_placed() {
  if (placed_.empty()) return;
  if (ordered()) {
    give_up_ordered();
    while (!placed_.empty()) complete_ordered(true);  // each aborted once its copies are done
    return;
  }
  // At stop (exit): nothing more is committed. Every standing hold is released at once, then each
  // epoch's moves are aborted: the old mappings stand and the copies were never made.
  raise_flag(flag_, placed_.back().value);
  while (!placed_.empty()) {
    Placed p = std::move(placed_.front());
    placed_.pop_front();
    forget(&p.hold);
    epoch_state_ = std::move(p.epoch);
    failed_.fetch_add(epoch_state_.taken.size() + epoch_state_.waiting.size(), std::memory_order_relaxed);
    settle(epoch_state_.taken);
    settle(epoch_state_.waiting);
    abort_all();
  }
  standing_.store(0, std::memory_order_relaxed);
  release(epoch_);
}

CUresult Mover::pipeline_step() {
  // The first standing epoch completes once the program's work reached its hold; then a new hold is
  // placed if there is room, requests, and no program call waiting at the gate (so a call waiting
  // gets in once the standing holds drain, rather than behind hold after hold).
  if (const CUresult r = complete_locked(false); r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) return r;
  // Ordered epochs whose copies are done commit together, in order.
  while (ordered() && !placed_.empty() && complete_locked(false) == CUDA_SUCCESS) {
  }
  bool queued = false;
  {
    MutexLock lock(queue_mu_);
    queued = !queue_.empty();
  }
  CUresult placed = CUDA_SUCCESS;
  if (queued && breaker_.pool_waiting()) {
    // Nor while a pool path waits for the device: the hold would be refused (may_hold), after the
    // gate's close had made the program's calls wait for nothing. Tried again a little later.
    placed = CUDA_ERROR_NOT_READY;
  } else if (queued && !on_launch() && placed_.size() < config_.holds_ahead &&
             (placed_.empty() || !streams_.host_waits().has_waiters())) {
    placed = place_locked();
    if (placed != CUDA_SUCCESS && placed != CUDA_ERROR_NOT_READY) return placed;
  }
  set_step(placed_.empty() ? MoverStep::Idle : MoverStep::Draining);
  // NOT_READY (the caller waits a little): holds stand, or an epoch was put off (a graph capture).
  return placed_.empty() && placed == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

MoverStats Mover::stats() const {
  MoverStats s;
  s.requested = requested_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.epochs = epochs_.load(std::memory_order_relaxed);
  s.epochs_postponed = postponed_.load(std::memory_order_relaxed);
  s.moves = moves_.load(std::memory_order_relaxed);
  s.promoted_bytes = promoted_.load(std::memory_order_relaxed);
  s.demoted_bytes = demoted_.load(std::memory_order_relaxed);
  s.moves_failed = failed_.load(std::memory_order_relaxed);
  s.held_ns = held_ns_.load(std::memory_order_relaxed);
  s.holds_given_up = given_up_.load(std::memory_order_relaxed);
  s.holds_extended = extended_.load(std::memory_order_relaxed);
  s.holds_broken = breaker_.breaks();
  s.off = off_.load(std::memory_order_relaxed);
  s.step = step_.load(std::memory_order_acquire);
  const std::int64_t since = step_since_ns_.load(std::memory_order_relaxed);
  const std::int64_t now = steady_ns(std::chrono::steady_clock::now());
  s.step_ms = s.step != MoverStep::Idle && since != 0 && now > since ? static_cast<std::uint64_t>((now - since) / 1000000) : 0;
  s.standing_holds = standing_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kMoverSteps; ++i) s.step_us[i] = step_ns_[i].load(std::memory_order_relaxed) / 1000;
  return s;
}

}  // namespace uvmpool::tiering
