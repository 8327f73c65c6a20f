#include "tiering/tiering.h"


#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <new>
#include <thread>

#include "config/leak_marker.h"
#include "config/log.h"
#include "config/options.h"
#include "config/quiet_at_fork.h"
#include "driver/real_driver.h"
#include "tiering/launch_args.h"
#include "tiering/period_clock.h"
#include "tiering/unlearned_step.h"
#include "trace/trace.h"

namespace uvmpool::tiering {
namespace {

std::atomic<Tiering*> g_process{nullptr};
std::mutex g_process_mu;

// Buffers one launch shows the policy at most: a pointer into carved memory shows one per slot
// (show_policy), so more than the pointers a launch keeps.
constexpr std::size_t kShownBuffers = 2 * LaunchTouches::kMax;

}  // namespace

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "off") return Mode::Off;
  if (text == "remote") return Mode::Remote;
  if (text == "auto") return Mode::Auto;
  if (text.empty()) return Mode::Auto;  // the default (options.def)
  return std::nullopt;
}

Mode configured_mode() {
  const config::Options& o = config::options();
  if (o.disable || !o.pool) return Mode::Off;
  return parse_mode(o.tiering).value_or(Mode::Auto);  // the option table refuses other values
}

MoverConfig configured_mover() {
  const config::Options& o = config::options();
  MoverConfig c;
  c.overlap = o.tiering_copy == "overlap";
  c.max_batch_bytes = o.tiering_batch.bytes;
  c.holds_ahead = static_cast<std::size_t>(o.tiering_holds_ahead);
  c.prepare_at_hold = o.tiering_prepare == "hold";
  c.commit_beside_copies = o.tiering_commit != "after";
  if (o.tiering_epochs == "launch" && c.overlap) {
    // Ordered epochs placed by the launching thread as the policy asks, so that each move's fence lies
    // where it was asked for in the program's order; the mover's thread completes them (a program
    // thread that synchronizes waits for their commits).
    c.on_launch = true;
    c.launches_per_epoch = 1;
  } else if (o.tiering_epochs == "launch") {  // one hold at a time, on the launching thread (mover.h)
    c.on_launch = true;
    c.thread = false;
    c.holds_ahead = 1;
  }
  // With measure, the launching thread's cadence once the trial gives it the epochs (Mover::set_on_launch).
  if (!c.overlap) c.launches_per_epoch = std::max<std::size_t>(static_cast<std::size_t>(o.tiering_lookahead) / 8, 1);
  return c;
}

PolicyConfig configured_policy() {
  const config::Options& o = config::options();
  PolicyConfig c;
  c.lookahead = static_cast<std::size_t>(o.tiering_lookahead);
  c.in_flight_bytes = o.tiering_in_flight.bytes;
  c.pieces = o.tiering_unit == "piece";
  c.guard.setting = o.tiering_thrash_guard == "on"    ? TrialSetting::First
                    : o.tiering_thrash_guard == "off" ? TrialSetting::Second
                                                      : TrialSetting::Measure;  // the option table refuses others
  // Which thread runs the epochs is tried only with held copies: ordered epochs place on the launching
  // thread for another reason (their fences' place in the program's order) and complete on the mover's.
  c.epochs.setting = o.tiering_epochs == "measure" && o.tiering_copy != "overlap" ? TrialSetting::Measure : TrialSetting::First;
  return c;
}

// The policy's questions answered by the pool, its requests handed to the mover.
class Tiering::PoolWorld : public Policy::World {
 public:
  using Ask = std::function<bool(CUdeviceptr, CUdeviceptr, pool::Tier, int)>;
  // `pieces`: the policy's buffers are pieces of allocations (pieces.h).
  PoolWorld(const driver::Table& driver, pool::Pool& pool, Mover& mover, Ask ask, bool pieces)
      : pool_(pool), mover_(mover), ask_(std::move(ask)), clock_(driver), pieces_(pieces) {}

  // Spilled allocations lie in host memory from some point to their end (placement fills the device
  // first), and moves move whole allocations (or whole pool pieces): the first and last granules tell.
  bool in_host(const Policy::Buffer& b) override {
    const auto [from, end] = carried(b);
    return pool_.probe(from).host || (end != from && pool_.probe(end - 1).host);
  }

  std::uint64_t host_bytes(const Policy::Buffer& b) override {
    std::uint64_t bytes = 0;
    for (auto [at, end] = carried(b); at < end;) {
      const pool::Pool::Probe hit = pool_.probe(at);
      if (hit.owner == 0) break;  // freed since the launch
      const CUdeviceptr next = std::min<CUdeviceptr>(hit.granule_end, end);
      if (hit.host) bytes += next - at;
      at = next;
    }
    return bytes;
  }

  std::uint64_t device_room() override { return pool_.promotion_room(device_); }

  bool promote_part(const Policy::Buffer& b, std::uint64_t room) override {
    // The range from the start that holds as many host pieces as the room takes: the mover asked for
    // it moves only those (Tiering::ask_moves). The pool knows the pieces (a demoted range's host
    // extents are larger than a granule and move whole); while its lock is busy, granules stand in.
    if (std::optional<CUdeviceptr> end = pool_.promotable_end(device_, b.base, room)) {
      *end = std::min<CUdeviceptr>(*end, b.base + b.bytes);  // the pool's answer runs to the mapping's end
      return *end != b.base && host_bytes({b.base, b.base, *end - b.base}) != 0 &&
             ask_(b.base, *end, pool::Tier::Device, device_);
    }
    const std::uint64_t granule = std::max<std::uint64_t>(pool_.stats(device_).chunk_size, 1);
    std::uint64_t pieces = room / granule;
    CUdeviceptr end = b.base;
    for (const CUdeviceptr last = b.base + b.bytes; end < last && pieces != 0;) {
      const pool::Pool::Probe hit = pool_.probe(end);
      if (hit.owner == 0) break;
      const CUdeviceptr next = std::min<CUdeviceptr>(hit.granule_end, last);
      if (hit.host) {
        if ((next - end + granule - 1) / granule > pieces) break;  // a larger piece than the room
        pieces -= (next - end + granule - 1) / granule;
      }
      end = next;
    }
    return end != b.base && host_bytes({b.base, b.base, end - b.base}) != 0 &&
           ask_(b.base, end, pool::Tier::Device, device_);
  }

  // The allocation's pieces in the other tier.
  bool move(const Policy::Buffer& b, pool::Tier to) override {
    const auto [from, end] = carried(b);
    return ask_(from, end, to, device_);
  }

  bool moving(const Policy::Buffer& b) override {
    const auto [from, end] = carried(b);
    return mover_.outstanding(from, end - from);
  }

  bool in_stream_order() override { return mover_.prepares_at_hold(); }

  std::optional<PeriodTrial::Time> period_started(std::uint64_t n) override { return clock_.mark(n, stream_, capturing_); }

  // The launch shown to the policy now: its device, its stream, and whether a capture is under way.
  void set_launch(int device, CUstream stream, bool capturing) {
    device_ = device;
    stream_ = stream;
    capturing_ = capturing;
  }

 private:
  pool::Pool& pool_;
  Mover& mover_;
  const Ask ask_;
  PeriodClock clock_;
  const bool pieces_;
  // What a move of the buffer carries: the allocation, or with pieces the pool's whole pieces under
  // the policy's piece (a spilled allocation's host extents are larger than most tensors, and a move
  // carries them whole: counting only the piece's bytes, the policy made too little room and the
  // pool refused the promotion). While the pool's lock is busy, the piece stands in.
  std::pair<CUdeviceptr, CUdeviceptr> carried(const Policy::Buffer& b) {
    const std::pair<CUdeviceptr, CUdeviceptr> piece{b.base, b.base + b.bytes};
    if (!pieces_ || b.bytes == 0) return piece;
    return pool_.whole_pieces(device_, piece.first, piece.second).value_or(piece);
  }
  int device_ = 0;
  CUstream stream_ = nullptr;
  bool capturing_ = false;
};

bool Tiering::ask_moves(CUdeviceptr from, CUdeviceptr end, pool::Tier to, int device) {
  const std::uint64_t granule = std::max<std::uint64_t>(pool_.stats(device).chunk_size, 1);
  const std::uint64_t most = std::max<std::uint64_t>(mover_.config().max_batch_bytes / granule, 1) * granule;
  bool asked = false;
  const auto ask = [&](CUdeviceptr run_from, CUdeviceptr run_end) {
    for (CUdeviceptr at = run_from; at < run_end; at += most)
      asked |= mover_.request(at, std::min<CUdeviceptr>(most, run_end - at), to);
  };
  // Holds ahead: a move lands where the device reaches its hold (Mover::take_for_hold), after the
  // moves asked before it, which may take the same memory the other way (a promotion asked and not
  // landed, then a demotion asked). Where its pieces lie now says nothing then: all are asked for, and
  // those already in the tier when it is prepared are left.
  if (mover_.prepares_at_hold()) {
    ask(from, end);
    return asked;
  }
  for (const auto& [run_from, bytes] : pool_.runs_in_tier(from, end, to == pool::Tier::Device ? pool::Tier::Host : pool::Tier::Device))
    ask(run_from, run_from + bytes);
  return asked;
}

Tiering::Tiering(const driver::Table& driver, pool::Pool& pool, Mode mode, StreamRegistry& streams,
                 MoverConfig mover, PolicyConfig policy)
    : driver_(driver), pool_(pool), mode_(mode), streams_(streams), layouts_(driver),
      mover_(driver, pool, streams, mover),
      world_(std::make_unique<PoolWorld>(driver, pool, mover_, [this](CUdeviceptr from, CUdeviceptr end, pool::Tier to,
                                                              int device) { return ask_moves(from, end, to, device); },
                                        policy.pieces)),
      cut_pieces_(policy.pieces),
      epochs_measured_(policy.epochs.setting == TrialSetting::Measure && !mover.overlap),
      unlearned_after_(policy.unlearned_after) {
  if (mode == Mode::Auto) {
    policy_ = std::make_unique<Policy>(*world_, policy);
    streams.keep_retiring();  // moves will come: destroyed streams' queued work must be waited for
  }
}

Tiering::~Tiering() { mover_.stop(); }

Tiering* Tiering::process() {
  if (Tiering* t = g_process.load(std::memory_order_acquire)) return t;
  pool::Pool* pool = pool::Pool::existing();  // no pool yet: no pool memory for a kernel to touch
  if (pool == nullptr) return nullptr;
  static const Mode mode = configured_mode();
  if (mode == Mode::Off) return nullptr;
  std::lock_guard lock(g_process_mu);
  if (Tiering* t = g_process.load(std::memory_order_relaxed)) return t;
  const driver::RealDriver* real = driver::real();
  if (real == nullptr) return nullptr;
  // Never destroyed: launches may come during exit. Its mover's thread stops at exit (registered after
  // the pool's handler, so it runs first: the thread is out of the pool before the pool stops).
  auto* t = new Tiering(real->table, *pool, mode, StreamRegistry::process(), configured_mover(), configured_policy());
  g_process.store(t, std::memory_order_release);
  // A forked child drops the parent's Tiering untouched (its pool was dropped too, its threads are not
  // there) and makes its own over the child's pool, as Pool::process does.
  static std::once_flag registered;
  std::call_once(registered, [] {
    config::at_fork(nullptr, nullptr, [] {
      if (Tiering* p = g_process.exchange(nullptr)) config::intentionally_leaked(p);
      new (&g_process_mu) std::mutex;
    });
  });
  std::atexit([] {
    if (Tiering* p = g_process.load(std::memory_order_acquire)) p->stop();
  });
  return t;
}

Tiering* Tiering::existing() { return g_process.load(std::memory_order_acquire); }

void Tiering::before_launch(CUfunction f, CUstream stream, void** params, void** extra, LaunchSeen* seen) {
  // The common case when everything fits: nothing in host memory, nothing to see.
  seen->read = LaunchSeen::Read::Skipped;
  seen->function = f;
  seen->first_launch = nullptr;
  seen->epoch_after = LaunchSeen::EpochAfter::Counted;
  seen->captured = false;
  const bool captures = graphs_.capturing();
  if (f == nullptr || (!captures && !pool_.any_host_mapped() && !mover_.copying())) return;
  // A launch into a graph capture touches nothing now: what it names is the graph's (graph_touches.h).
  const std::uint64_t capture = captures ? capture_of(stream) : 0;
  if (capture == 0 && !pool_.any_host_mapped() && !mover_.copying()) return;
  if (capture == 0) wait_for_queue_room();
  LaunchTouches& touches = seen->touches;
  touches.count = touches.dropped = touches.host = 0;
  // Measured on an H100 (tests/gpu/hold_blocking.cu): the first launch of a lazily loaded kernel keeps
  // every other thread's driver calls out until the device is idle, and makes the mover's own streams
  // wait behind a hold. So it waits for the hold to end, and no hold begins while it is in the driver.
  // Asking the driver for a new kernel's layout is such a call too (cuKernelGetParamInfo on an H200;
  // cuFuncGetParamInfo did not wait), so it goes after the gate: scoreboard row 7 with epochs
  // prepared at the hold had holds given up while a backward thread ran inside the driver, and none
  // under CUDA_MODULE_LOADING=EAGER (docs/gpu-results.md, 2026-11-29). Not covered: a first launch skipped above (nothing in host
  // memory yet) that meets a demotion's hold; the runtime's lazy loading is gated at its own calls too
  // (src/hooks/host_wait_hooks.cpp).
  const ParamLayout* kept = layouts_.kept(f);
  const bool first = mode_ == Mode::Auto && (kept == nullptr || !kept->loaded.load(std::memory_order_acquire));
  if (first) {
    streams_.host_waits().enter();
  }
  // Out of memory below (a new layout, a capture's record): the gate is left before the hook answers
  // OUT_OF_MEMORY, or every later hold would wait for this thread for good.
  const ParamLayout* layout = nullptr;
  try {
    layout = kept != nullptr ? kept : layouts_.find(f);
    if (capture != 0) {
      std::vector<GraphTouches::Range> ranges;
      const bool readable = for_each_word(*layout, params, extra, [&](std::uint64_t word) {
        if (pool_.probe(static_cast<CUdeviceptr>(word)).owner != 0) ranges.emplace_back(word, 1);
      });
      graphs_.record(capture, readable ? &ranges : nullptr);
    }
  } catch (...) {
    if (first) streams_.host_waits().leave();
    throw;
  }
  if (first) seen->first_launch = layout;
  if (capture != 0) {
    captured_.fetch_add(1, std::memory_order_relaxed);
    seen->captured = true;
    return;  // Skipped: nothing runs until the graph does
  }
  const bool read = for_each_word(*layout, params, extra, [&](std::uint64_t word) {
    const pool::Pool::Probe hit = pool_.probe(static_cast<CUdeviceptr>(word));
    if (hit.owner != 0) touches.add({static_cast<CUdeviceptr>(word), hit.owner, hit.host});
  });
  if (!read) {
    seen->read = LaunchSeen::Read::Unread;
    launches_unread_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  seen->read = LaunchSeen::Read::Read;
  launches_read_.fetch_add(1, std::memory_order_relaxed);
  if (touches.count != 0) {
    pointers_.fetch_add(touches.count + touches.dropped, std::memory_order_relaxed);
    if (touches.host != 0) {
      host_pointers_.fetch_add(touches.host, std::memory_order_relaxed);
      launches_in_place_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (Observer o = observer_.load(std::memory_order_acquire))
    o(observer_context_.load(std::memory_order_relaxed), f, stream, touches);
}

void Tiering::wait_for_queue_room() {
  const std::uint64_t run_ahead = mover_.config().run_ahead;
  if (mode_ != Mode::Auto || run_ahead == 0) return;
  HostWaitGate& gate = streams_.host_waits();
  ProgressMarks& marks = mover_.progress();
  // Two loads in the common case: no hold, or the device close behind.
  if (!gate.closed() || marks.outstanding() < run_ahead / 2) return;
  // Each standing hold takes two places in each stream's queue (an event and a wait): with holds
  // placed ahead (up to UVMPOOL_TIERING_HOLDS_AHEAD) the launches may take fewer, never under half.
  const std::uint64_t holds = 2 * mover_.standing_holds();
  const std::uint64_t limit = run_ahead > run_ahead / 2 + holds ? run_ahead - holds : run_ahead / 2;
  if (marks.outstanding() < limit) return;
  bool counted = false;
  // Marks behind a standing hold do not pass: this waits until the hold is released (the gate opens)
  // or the device gets through enough of what came before it. Never unbounded: a hold that does not
  // drain is given up within the hold timeout, which opens the gate.
  for (;;) {
    marks.passed();  // event queries: they do not wait for the driver's lock (progress_marks.h)
    if (!gate.closed() || marks.outstanding() < limit) break;
    if (!counted) {
      counted = true;
      queue_waits_.fetch_add(1, std::memory_order_relaxed);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::uint64_t Tiering::capture_of(CUstream stream) {
  return graphs_.capturing() ? GraphTouches::capture_id(driver_, stream, true) : 0;
}

void Tiering::add_range_touches(CUdeviceptr address, std::size_t bytes, LaunchTouches& touches) {
  if (bytes == 0) return;
  const CUdeviceptr end = address + bytes > address ? address + bytes : ~CUdeviceptr{0};
  // A copy of a large tensor is one touch, not one per granule. A granule not the pool's ends the walk
  // (the driver refuses a range running out of its allocation).
  Touch run{};
  for (CUdeviceptr at = address; at < end;) {
    const pool::Pool::Probe hit = pool_.probe(at);
    if (hit.owner == 0) break;
    if (hit.owner != run.owner) {
      if (run.owner != 0) touches.add(run);
      run = {at, hit.owner, false};
    }
    run.host = run.host || hit.host;
    at = hit.granule_end;
  }
  if (run.owner != 0) touches.add(run);
}

void Tiering::before_transfer(Transfer kind, CUstream stream, std::span<const TransferRange> ranges, LaunchSeen* seen) {
  seen->read = LaunchSeen::Read::Skipped;
  seen->function = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(kind));
  seen->first_launch = nullptr;
  seen->epoch_after = LaunchSeen::EpochAfter::Never;
  seen->captured = false;
  if (graphs_.capturing())
    if (const std::uint64_t capture = capture_of(stream); capture != 0) {
      std::vector<GraphTouches::Range> recorded;
      node_ranges(ranges, &recorded);
      graphs_.record(capture, &recorded);
      captured_.fetch_add(1, std::memory_order_relaxed);
      seen->captured = true;
      return;  // Skipped: nothing runs until the graph does
    }
  if (!pool_.any_host_mapped() && !mover_.copying()) return;
  wait_for_queue_room();
  LaunchTouches& touches = seen->touches;
  touches.count = touches.dropped = touches.host = 0;
  for (const TransferRange& r : ranges) add_range_touches(r.address, r.bytes, touches);
  seen->read = LaunchSeen::Read::Read;
  transfers_read_.fetch_add(1, std::memory_order_relaxed);
  if (touches.host != 0) transfers_in_place_.fetch_add(1, std::memory_order_relaxed);
}

void Tiering::before_graph_launch(CUgraphExec exec, CUstream stream, LaunchSeen* seen) {
  seen->read = LaunchSeen::Read::Skipped;
  seen->function = reinterpret_cast<CUfunction>(exec);
  seen->first_launch = nullptr;
  seen->epoch_after = LaunchSeen::EpochAfter::Each;
  seen->captured = false;
  if (exec == nullptr) return;
  if (graphs_.capturing())
    if (const std::uint64_t capture = capture_of(stream); capture != 0) {  // a graph launched into a graph
      graphs_.capture_launched(capture, exec);
      captured_.fetch_add(1, std::memory_order_relaxed);
      seen->captured = true;
      return;
    }
  if (!pool_.any_host_mapped() && !mover_.copying()) return;
  wait_for_queue_room();
  std::vector<GraphTouches::Range> ranges;
  if (!graphs_.launch_ranges(exec, &ranges)) {
    seen->read = LaunchSeen::Read::Unread;
    graph_launches_unread_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  LaunchTouches& touches = seen->touches;
  touches.count = touches.dropped = touches.host = 0;
  // Several pointers into one buffer are one touch here: a graph names many, and the touches are few.
  for (const auto& [address, bytes] : ranges) {
    const pool::Pool::Probe hit = pool_.probe(address);
    if (hit.owner == 0) continue;  // freed since it was recorded, or another allocator's now
    if (bytes == 1) {
      bool known = false;
      for (std::size_t i = 0; i < touches.count && !known; ++i) known = touches.touches[i].owner == hit.owner;
      if (!known) touches.add({address, hit.owner, hit.host});
    } else {
      add_range_touches(address, bytes, touches);
    }
  }
  seen->read = LaunchSeen::Read::Read;
  graph_launches_read_.fetch_add(1, std::memory_order_relaxed);
  if (touches.count != 0) {
    pointers_.fetch_add(touches.count + touches.dropped, std::memory_order_relaxed);
    if (touches.host != 0) {
      host_pointers_.fetch_add(touches.host, std::memory_order_relaxed);
      launches_in_place_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

const ParamLayout* Tiering::begin_loading_call(CUfunction f) {
  if (mode_ != Mode::Auto || f == nullptr) return nullptr;
  const ParamLayout* kept = layouts_.kept(f);
  if (kept != nullptr && kept->loaded.load(std::memory_order_acquire)) return nullptr;
  streams_.host_waits().enter();  // before asking the driver for the layout, which may load it too
  if (kept != nullptr) return kept;
  try {
    return layouts_.find(f);
  } catch (...) {  // out of memory: the hook answers so, and the gate must not stay entered
    streams_.host_waits().leave();
    throw;
  }
}

void Tiering::end_loading_call(const ParamLayout* layout, CUresult result) {
  if (layout == nullptr) return;
  if (result == CUDA_SUCCESS) layout->loaded.store(true, std::memory_order_release);
  streams_.host_waits().leave();
}

void Tiering::order_behind_moves(const LaunchSeen& seen, CUstream stream) {
  if (!mover_.copying() || seen.captured) return;  // captured work runs when its graph does
  // Unread (or skipped before any move was published): its pointers are unknown, it waits for all.
  const std::uint32_t value = mover_.order_value(seen.touches, seen.read != LaunchSeen::Read::Read);
  if (value == 0) return;
  launches_ordered_.fetch_add(1, std::memory_order_relaxed);
  const CUdeviceptr flag = mover_.flag_device();
  if (flag != 0 && driver_.cuStreamWaitValue32_v2(stream, flag, value, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS) return;
  // The wait could not be queued (a stream of another context, say): this thread waits instead.
  ordered_on_host_.fetch_add(1, std::memory_order_relaxed);
  mover_.wait_released(value);
}

void Tiering::after_launch(const LaunchSeen& seen, CUstream stream) noexcept {
  if (seen.first_launch != nullptr) {
    seen.first_launch->loaded.store(true, std::memory_order_release);
    streams_.host_waits().leave();
  }
  // Called from a destructor after the driver took the launch: nothing may escape (std::terminate).
  // What can throw below is the policy's bookkeeping running out of memory: this launch goes unseen.
  try {
    after_launch_seen(seen, stream);
  } catch (...) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      try {
        log::warn("tiering: out of memory showing a launch to the policy; it goes unseen (said once)");
      } catch (...) {
      }
    }
  }
}

void Tiering::after_launch_seen(const LaunchSeen& seen, CUstream stream) {
  if (seen.read == LaunchSeen::Read::Read && seen.touches.count != 0 &&
      (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)) {
    CUcontext context = nullptr;
    if (driver_.cuCtxGetCurrent(&context) == CUDA_SUCCESS) streams_.saw_context(context);
  }
  if (seen.read == LaunchSeen::Read::Read && seen.touches.count != 0) {
    if (trace::recording()) trace_launch(seen);
    if (mode_ == Mode::Auto) show_policy(seen, stream);
  }
  // UVMPOOL_TIERING_EPOCHS=launch: what this launch (or an earlier one) asked for moves now, on this
  // thread, before the program queues more: the epoch waits for the work queued before its hold, so
  // each move lands where the policy asked for it. Every launches_per_epoch-th launch while moves are
  // queued, so that one epoch carries the asks of a few launches (modeled on the training replay, an
  // epoch every 1, 2, 4, 8, 16 launches: 100.0, 92.2, 79.0, 80.5, 239.3 ms a step: past a few the
  // moves land too late). A graph launch is many kernels' work: an epoch after each (LaunchSeen::
  // epoch_after). Out of the host-wait gate here (a first launch left it above), so the epoch's
  // closing of the gate does not wait for this thread; never after a copy or memset, since a
  // synchronous copy's hook is still inside the gate here (transfer_hooks.cpp). Another thread's
  // epoch under way: this one goes on.
  using EpochAfter = LaunchSeen::EpochAfter;
  const auto epoch_due = [&] {
    return seen.epoch_after == EpochAfter::Each ||
           launches_since_epoch_.fetch_add(1, std::memory_order_relaxed) % std::max<std::size_t>(mover_.config().launches_per_epoch, 1) == 0;
  };
  if (mode_ == Mode::Auto && seen.epoch_after != EpochAfter::Never && mover_.on_launch() && mover_.queued() && epoch_due()) {
    // Ordered epochs (overlap): placed here, behind the mover thread's step under way if need be, so
    // that the fence lies where the policy asked; the mover's thread completes them.
    if (mover_.config().overlap) {
      mover_.place_epoch();
    } else {
      mover_.poll();
    }
  }
}

void Tiering::trace_launch(const LaunchSeen& seen) {
  // The launch, then each pointer it passed with its allocation's size: the trace's launch track.
  struct Touched {
    CUdeviceptr address;
    std::uint64_t base, bytes;
    bool host;
  };
  Touched touched[LaunchTouches::kMax];
  std::uint64_t bytes = 0, host_bytes = 0;
  int device = -1;
  for (std::size_t i = 0; i < seen.touches.count; ++i) {
    const Touch& t = seen.touches.touches[i];
    const std::optional<pool::AllocationInfo> info = pool_.find(t.address);
    touched[i] = {t.address, info ? info->base : 0, info ? info->size : 0, t.host};
    if (!info) continue;
    if (device < 0) device = info->device;
    const bool counted = std::any_of(touched, touched + i, [&](const Touched& o) { return o.base == info->base; });
    if (counted) continue;  // tensors of one allocation: its bytes once
    bytes += info->size;
    if (t.host) host_bytes += info->size;
  }
  trace::record(trace::Kind::Launch, device, reinterpret_cast<std::uintptr_t>(seen.function), bytes, host_bytes);
  for (std::size_t i = 0; i < seen.touches.count; ++i)
    trace::record(trace::Kind::Touch, device, touched[i].address, touched[i].bytes, touched[i].host ? touched[i].bytes : 0);
}

void Tiering::show_policy(const LaunchSeen& seen, CUstream stream) {
  // Each pointer as the buffer it lies in: the live allocation's base and size (the pool's answer),
  // or with pieces the piece of it the pointer starts (pieces.h).
  Policy::Buffer buffers[kShownBuffers];
  std::uint64_t ids[kShownBuffers];
  std::size_t n = 0;
  int device = -1;
  for (std::size_t i = 0; i < seen.touches.count && n < kShownBuffers; ++i) {
    const Touch& t = seen.touches.touches[i];
    const std::optional<pool::AllocationInfo> info = pool_.find(t.address);
    if (!info) continue;  // a cached mapping or a slab's free slot: nothing live to plan for
    if (device < 0) device = info->device;
    const CUdeviceptr end = info->base + info->size;
    const auto slots = cut_pieces_ ? std::nullopt : pool_.carved_slots(t.address, end);
    if (!slots) {
      ids[n] = info->buffer_id;
      buffers[n++] = {t.address, info->base, info->size, t.host, advice_.preference(*info)};
      continue;
    }
    // Carved memory moves a slot at a time (pool/carved_moves.cpp): a buffer per slot from the
    // pointer's to the allocation's last, so that allocations sharing a slot are one buffer to the
    // policy rather than moves that refuse each other, and the pointers of the allocations in a slot
    // tell the policy how much of it each use reads (Policy::count_period_reads); modeled, training
    // with carving ran 85.5 ms a step this way against 92.8 with one buffer spanning the slots. Past
    // kShownBuffers the rest of a launch's slots go unplanned (only speed suffers).
    for (CUdeviceptr slot = slots->start; slot < slots->end && n < kShownBuffers; slot += slots->slot_bytes) {
      const bool host = slot == slots->start ? t.host : pool_.probe(slot).host;
      ids[n] = info->buffer_id;
      buffers[n++] = {t.address, slot, slots->slot_bytes, host, slot_preference(slot, slots->slot_bytes), info->size};
    }
  }
  if (n == 0) return;
  MutexLock lock(policy_mu_);
  for (std::size_t i = 0; cut_pieces_ && i < n; ++i) {
    Policy::Buffer& b = buffers[i];
    const Pieces::Piece piece = pieces_.cut({.base = b.base, .size = b.bytes, .buffer_id = ids[i]}, b.address);
    b.allocation_bytes = b.bytes;
    b.base = piece.base;
    b.bytes = piece.bytes;
  }
  if (cut_pieces_ && ++pieces_shown_ % kPrunePiecesEvery == 0) {
    // Now and then the cuts of freed allocations go (a base that came back in another allocation
    // meanwhile is started anew by cut(), by its id).
    pieces_.prune([this](CUdeviceptr base, std::uint64_t id) {
      const std::optional<pool::AllocationInfo> live = pool_.find(base);
      return live && live->base == base && live->buffer_id == id;
    });
  }
  world_->set_launch(device, stream, graphs_.capturing());
  mover_.progress().launched(stream, graphs_.capturing());
  policy_->on_launch(reinterpret_cast<std::uintptr_t>(seen.function), std::span<const Policy::Buffer>(buffers, n));
  if (epochs_measured_) mover_.set_on_launch(policy_->epochs_on_launch());
  if (!unlearned_said_ && ++launches_shown_ % kUnlearnedCheckEvery == 0) say_if_unlearned();
}

void Tiering::say_if_unlearned() {
  if (unlearned_after_ == 0) {
    unlearned_said_ = true;
    return;
  }
  const PolicyStats s = policy_->stats();
  if (s.period != 0) {
    last_held_period_at_ = s.launches;
    return;
  }
  // Never learned, or learned and dropped (on the freeing replay the step is learned from its first
  // steps, then moves change where memory is reallocated and it is dropped for good).
  const std::uint64_t without = s.launches - last_held_period_at_;
  if (without < unlearned_after_) return;
  unlearned_said_ = true;
  log::warn("{}", unlearned_step_warning(without, s.periods_learned != 0, std::getenv("PYTORCH_CUDA_ALLOC_CONF"),
                                         std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING")));
}

PolicyStats Tiering::policy_stats() {
  MutexLock lock(policy_mu_);
  return policy_ != nullptr ? policy_->stats() : PolicyStats{};
}

bool Tiering::prefetch(std::span<const pool::AllocationInfo> allocations, CUdeviceptr p, CUdeviceptr end, Place to) {
  prefetches_.fetch_add(1, std::memory_order_relaxed);
  if (mode_ != Mode::Auto) return false;  // remote: nothing moves
  bool asked = false;
  for (const pool::AllocationInfo& a : allocations) {
    if (to.tier == pool::Tier::Device && to.device != a.device) continue;  // memory stays on its device
    const CUdeviceptr from = std::max<CUdeviceptr>(p, a.base), until = std::min<CUdeviceptr>(end, a.base + a.size);
    if (from < until) asked |= ask_moves(from, until, to.tier, a.device);
  }
  return asked;
}

Preference Tiering::slot_preference(CUdeviceptr slot, std::size_t bytes) const {
  if (!advice_.any()) return Preference::None;  // launches pay nothing more until advice is given
  return advice_.shared(pool_.carved_slot_allocations(slot, slot + bytes));
}

void Tiering::advise(std::span<const pool::AllocationInfo> allocations, std::optional<Preference> preference, int device) {
  advice_calls_.fetch_add(1, std::memory_order_relaxed);
  if (!preference) return;
  std::vector<Policy::Advised> told;  // `allocations` are in address order (advice.cpp: covering)
  told.reserve(allocations.size());
  for (const pool::AllocationInfo& a : allocations) {
    const Preference p = *preference == Preference::Device && device != a.device ? Preference::None : *preference;
    advice_.prefer(a, p);
    told.push_back({a.base, a.base + a.size, p});
  }
  // Carved memory is planned a slot at a time (show_policy): each slot the advice reached is told the
  // preference of all the allocations in it, once all of this call's advice is kept.
  if (!cut_pieces_) {
    std::vector<Policy::Advised> slotted;
    slotted.reserve(told.size());
    for (const Policy::Advised& a : told) {
      const auto carved = pool_.carved_slots(a.from, a.end);
      if (!carved) {
        slotted.push_back(a);
        continue;
      }
      for (CUdeviceptr slot = carved->start; slot < carved->end; slot += carved->slot_bytes)
        if (slotted.empty() || slotted.back().from != slot)  // the allocation before shares it
          slotted.push_back({slot, slot + carved->slot_bytes, slot_preference(slot, carved->slot_bytes)});
    }
    told = std::move(slotted);
  }
  {
    MutexLock lock(policy_mu_);
    if (policy_) policy_->advised(told);
  }
  advice_.prune([this](CUdeviceptr base, std::uint64_t id) {
    const std::optional<pool::AllocationInfo> live = pool_.find(base);
    return live && live->base == base && live->buffer_id == id;
  });
}

void Tiering::set_observer(Observer observer, void* context) {
  observer_context_.store(context, std::memory_order_relaxed);
  observer_.store(observer, std::memory_order_release);
}

Stats Tiering::stats() const {
  Stats s;
  s.launches_read = launches_read_.load(std::memory_order_relaxed);
  s.launches_unread = launches_unread_.load(std::memory_order_relaxed);
  s.pointers = pointers_.load(std::memory_order_relaxed);
  s.host_pointers = host_pointers_.load(std::memory_order_relaxed);
  s.launches_in_place = launches_in_place_.load(std::memory_order_relaxed);
  s.transfers_read = transfers_read_.load(std::memory_order_relaxed);
  s.transfers_in_place = transfers_in_place_.load(std::memory_order_relaxed);
  s.captured = captured_.load(std::memory_order_relaxed);
  s.graph_launches_read = graph_launches_read_.load(std::memory_order_relaxed);
  s.graph_launches_unread = graph_launches_unread_.load(std::memory_order_relaxed);
  s.prefetches = prefetches_.load(std::memory_order_relaxed);
  s.advice = advice_calls_.load(std::memory_order_relaxed);
  s.layouts_asked = layouts_.driver_queries();
  const MoverStats m = mover_.stats();
  s.moves = m.moves;
  s.promoted_bytes = m.promoted_bytes;
  s.demoted_bytes = m.demoted_bytes;
  s.launches_ordered = launches_ordered_.load(std::memory_order_relaxed);
  s.ordered_on_host = ordered_on_host_.load(std::memory_order_relaxed);
  s.moves_failed = m.moves_failed;
  s.epochs = m.epochs;
  s.holds_given_up = m.holds_given_up;
  s.holds_extended = m.holds_extended;
  s.holds_broken = m.holds_broken;
  s.host_waits = streams_.host_waits().waited();
  s.queue_waits = queue_waits_.load(std::memory_order_relaxed);
  s.mover_step = static_cast<std::uint64_t>(m.step);
  s.mover_step_seconds = m.step_ms / 1000;
  s.holds_standing = m.standing_holds;
  s.mover_step_us = m.step_us;
  s.gate_closed = streams_.host_waits().closed() ? 1 : 0;
  s.gate_waiting = static_cast<std::uint64_t>(std::max(streams_.host_waits().waiters(), 0));
  if (mode_ == Mode::Auto) {
    MutexLock lock(policy_mu_);
    const PolicyStats p = policy_->stats();
    s.policy_period = p.period;
    s.periods_learned = p.periods_learned;
    s.periods_dropped = p.periods_dropped;
    s.periods_retaken = p.periods_retaken;
    s.kept_in_place = p.kept_in_place;
    s.kept_by_advice = p.kept_by_advice;
    s.parts_promoted = p.parts_promoted;
    s.guard_trials = p.guard.trials;
    s.guard_off = p.guard.second;
    s.epochs_trials = p.epochs.trials;
    s.epochs_on_launch = mover_.on_launch() ? 1 : 0;
  }
  return s;
}

}  // namespace uvmpool::tiering
