// The mover: changes the tier of pool memory at its addresses, in batches ("epochs"), while keeping
// the invariant tiering rests on:
//
//   No work that is queued or running touches memory while its mapping changes, and no write the
//   program makes to memory being moved is lost.
//
// The driver has no stream-ordered remap: cuMemUnmap, cuMemMap and cuMemSetAccess act at once and do
// not wait for kernels still using the range (../shared/FACTS.md). And a kernel may reach any memory
// through pointers kept in device memory (a gather's index rows, batched GEMMs' pointer arrays), which
// no hook sees. So the mover never relies on knowing what a kernel touches for correctness; it holds
// the program's work still instead, without blocking the program's threads:
//
//   1. prepare (Pool::prepare_move): the target pieces, mapped at a staging address.
//   2. hold: on every stream of the program (streams.h: each context's legacy stream, which orders
//      every blocking stream, and each non-blocking stream) an event is recorded, then a
//      cuStreamWaitValue32 on a pinned flag: later work queues behind the wait, on the GPU. The mover
//      thread waits for the events: then nothing the program queued before runs any more. The pool's
//      lock is not held meanwhile: the work before the hold may wait for what a program thread does
//      next, a free that takes that lock included (Mover::finish).
//   3. copy to the staging mappings on the mover's own streams (one per direction, two copy engines),
//      an event after each move's copy. A mapping still freed whose free began before the hold's
//      events were recorded is not copied: no work may read it (Held::frees_before).
//   4. commit (Pool::commit_quiesced): each move, once its own copy's event is done, unmaps its old
//      pieces and maps the new at the same address, while the later moves' copies still run; so the
//      pause lasts about the longer of the copies and the remaps, not their sum. The watchdog stands
//      until the last commit, kept from firing during each remap.
//   5. release: the flag is written; the held work goes on, on the new pieces.
// The program's launching threads never wait, except at the host-wait gate (host_wait_gate.h: the
// calls that would wait inside the driver behind a hold, a function's first launch among them, wait
// outside it while a hold stands; the gate is closed before a hold is placed); its streams pause for
// one epoch (the copy and the remaps of its batch). An epoch takes both directions, up to a batch each: promotions and demotions
// copy on two streams of the mover's, in opposite PCIe directions at once. A promotion takes device
// room that is free when it is prepared; the room an epoch's demotions make is free from the next
// epoch on, so a promotion refused for room while demotions are under way waits for that epoch.
//
// With `overlap` (UVMPOOL_TIERING_COPY=overlap), the moves are ordered in the program's streams
// instead of holding them: nothing waits but the launches that touch what moves.
//   1. prepare, as above.
//   2. publish and fence: with the submission gate closed, each move's owner is published with the
//      epoch's value, then an event is recorded on every stream (the fence).
//   3. copy on the mover's streams behind the fence events, beside the program's later work.
//   4. order: a launch, copy, memset or graph launch queued after the fence that touches a published
//      owner (or whose pointers are not all known) gets a cuStreamWaitValue32 for the epoch's value
//      in front of it on its own stream (order_value; Tiering::order_behind_moves, inside the
//      submission gate, so it is either before the fence or sees the move published).
//   5. commit once the epoch's copies are done (all work before the fence is then done too): remaps
//      with the remap gate closed, the owners unpublished, the flag raised to the value: the ordered
//      work goes on, on the new pieces.
// Up to `holds_ahead` epochs stand at once, each copying behind its own fence and committed in
// order, so a move asked for lands as soon as its copy is done, not one epoch per drain. The
// host-wait gate is closed while any stands (a synchronous call waiting inside the driver behind an
// ordered launch would keep the commit's remaps out, as behind a hold); calls that wait on the host
// wait outside meanwhile. The invariant then rests on what the hooks see: a kernel that reaches moving
// memory through a pointer kept in device memory is not ordered behind the move, and may read it
// while it is remapped. So overlap is for programs whose kernels get their pointers as arguments
// (docs/tiering.md); held copies are the default.
//
// Holds ahead (`holds_ahead` > 1, held copies only). A hold waits for all the work queued before it,
// and a program may queue far ahead: PyTorch ran about half a training step ahead of the GPU on an
// H100, so holds took up to 2.3 s to drain, the mover ran one epoch per drain, and a move asked for
// 32 launches ahead landed about a thousand launches later (docs/tiering.md). With holds ahead, the
// mover places an epoch's hold (steps 1 and 2) as soon as it is asked for, without waiting, and
// places the next epochs' behind it while the first drains, up to `holds_ahead` standing at once;
// each is completed (steps 3 to 5) when the program's work reaches it, in order. Each move thus takes
// effect where it was asked for in the program's stream order. The holds' values rise, so a stream
// waits at each hold in turn, and a flag is only ever raised: writing one hold's value never
// releases a later one. While any hold stands the host-wait gate stays closed, and no new hold is
// placed while a program call waits at the gate (so the calls get in once the standing holds drain).
// A hold that does not drain within the hold timeout once it is the first is given up, as by the
// watchdog. The pool's lock is taken only for each epoch's commit, never across a drain. A pool path
// that waits for the device under that lock (a free's fence before an unmap) would meet the standing
// holds and never end, since completing them takes the lock: before such a wait the hold breaker
// (hold_breaker.h) releases every standing hold, and their epochs commit nothing. And the mover's
// thread may itself be stuck while holds stand (waiting for a lock, or in a driver call that waits
// behind a hold), where no timeout of its own runs: with its thread, a stall guard releases every
// standing hold once the oldest has stood for twice the hold timeout, counted as a hold given up.
//
// With `prepare_at_hold` (holds ahead only), step 1 moves too: an epoch's requests are taken when its
// hold is placed and prepared when the program's work reaches it, after the epochs before it
// committed, so a promotion takes the room the demotions before it in the program's order made
// (take_for_hold, prepare_waiting; docs/tiering.md "Prepared at the hold").
//
// Requests come from the policy (next), cuMemPrefetchAsync and uvmpool_prefetch; each is carried out
// at the next epoch, on the mover's thread or (tests) on the caller's (run_epoch, place_epoch).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "tiering/mover_step.h"
#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "pool/pool.h"
#include "tiering/hold_breaker.h"
#include "tiering/progress_marks.h"
#include "tiering/streams.h"
#include "tiering/touches.h"

namespace uvmpool::tiering {

struct MoverConfig {
  bool overlap = false;                               // copies beside the program's work, ordered launches (above)
  std::size_t max_batch_bytes = std::size_t{256} << 20;  // moved per epoch at most
  bool thread = true;                                 // epochs on a thread of the mover's own
  // Epochs on the launching thread instead (UVMPOOL_TIERING_EPOCHS=launch): Tiering::after_launch runs
  // one (poll) when moves are queued and no epoch is under way; no thread of the mover's own, one hold
  // at a time. So moves asked for (by the policy, a prefetch or advice) land at a later kernel launch.
  bool on_launch = false;
  // With on_launch: an epoch every this many kernel launches while moves are queued (Tiering makes it
  // the policy's lookahead / 8, so a promotion asked `lookahead` launches ahead lands with most of
  // them to spare).
  std::size_t launches_per_epoch = 1;
  // A hold not drained by then, with no progress mark passed meanwhile, is given up (released,
  // nothing committed): work queued before it may wait for work queued after it (a kernel on one
  // device waiting for one on another, both held). One under which the device still passes the
  // program's marks (progress_marks.h) is waited for another hold timeout.
  std::chrono::milliseconds hold_timeout{10000};
  std::uint64_t progress_every = 128;  // launches shown between two progress marks
  // While the host-wait gate is closed (a hold stands or is being placed), a launch, copy or memset
  // comes to the driver only while fewer than this many launches shown may be unfinished on the device
  // (progress_marks.h); the others wait outside the driver (Tiering). A stream takes 1020 launches
  // behind a hold on an H200, and one launch waiting inside the driver for room keeps the hold's copies
  // and remaps out: half that leaves room for what is not counted (event records, the holds' own waits,
  // another context's work). 0: no bound.
  std::uint64_t run_ahead = 512;
  // Epochs whose holds may stand at once (see "Holds ahead" above); 1: each epoch drains, copies,
  // commits and releases before the next is prepared. With overlap: the epochs copying at once.
  std::size_t holds_ahead = 1;
  // With holds ahead: prepare each epoch's pieces when the program's work reaches its hold, after the
  // earlier epochs committed (Mover::take_for_hold), instead of when it is placed. Off by default:
  // on an H200 it made row 7's first holds fail to drain (docs/tiering.md). With overlap: when the
  // work reaches its fence, after the earlier epochs committed.
  bool prepare_at_hold = false;
  // With held copies: each move commits as soon as its own copy is done, beside the epoch's later
  // copies (UVMPOOL_TIERING_COMMIT=beside), or all once every copy is (after). Beside, the remaps' host
  // time overlaps the copies' (modeled, training 97.5 -> 87.6 ms a step), but on an H200 a host
  // mapping's remap while copies run both ways took 3.4x as long (32 MiB; 11x at 2 MiB;
  // tests/gpu/remap_under_load.py).
  bool commit_beside_copies = true;
  // With holds ahead: how long the first hold's closing of the host-wait gate waits for the program's
  // calls inside the driver to return before the epoch is put off (mover.cpp, place_locked); and how
  // long the submission gates' closings wait for the calls inside them (host_wait_gate.h).
  std::chrono::milliseconds gate_patience{50};
  // For tests, to place program work inside an epoch: called on the epoch's thread right after an
  // ordered epoch's copies finished (overlap), and right after the hold was recorded on every stream.
  std::function<void()> after_copy;
  std::function<void()> inside_hold;
  // And between a hold's event and its wait on a stream, with the submission gate closed.
  std::function<void()> between_event_and_wait;
  // The clock the time at each step is summed on (MoverStats::step_us), in nanoseconds; steady_clock
  // when empty. The modeled benchmarks pass the simulator's virtual clock, so the sums are modeled time.
  std::function<std::int64_t()> step_clock;
};

struct MoverStats {
  std::uint64_t requested = 0;        // requests accepted
  std::uint64_t refused = 0;          // requests refused: the queue was full
  std::uint64_t epochs = 0;           // epochs that held the program's streams
  std::uint64_t epochs_postponed = 0;  // ... put off: a stream was capturing a graph
  std::uint64_t moves = 0;            // committed
  std::uint64_t promoted_bytes = 0;   // to device memory
  std::uint64_t demoted_bytes = 0;    // to host memory
  std::uint64_t moves_failed = 0;     // refused by the pool or the driver (no room, a failing step)
  std::uint64_t held_ns = 0;          // host time the program's streams were held, summed over epochs
  std::uint64_t holds_given_up = 0;   // holds the watchdog gave up (the program's work did not drain)
  std::uint64_t holds_extended = 0;   // hold timeouts passed with the device still passing marks: waited on
  std::uint64_t holds_broken = 0;     // times the standing holds were released for a pool wait (hold_breaker.h)
  bool off = false;                   // moves turned off for good: holds kept failing to drain
  // Now, not counts: what the mover is doing and for how long (ms), and the holds standing.
  MoverStep step = MoverStep::Idle;
  std::uint64_t step_ms = 0;
  std::uint64_t standing_holds = 0;
  // Host time the mover spent at each step but Idle (microseconds, summed over the threads that ran
  // its steps, indexed by MoverStep): where an epoch's time goes, draining against copying against
  // remapping. Counted as each step ends, so a step under way is not in it yet.
  std::array<std::uint64_t, kMoverSteps> step_us{};
};

class Mover {
 public:
  static constexpr std::size_t kMaxFlight = 64;  // moves per epoch at most
  static constexpr std::size_t kMaxQueued = 4096;
  // Epochs a promotion refused for room is put back for while demotions queued or in its own epoch
  // may make that room (demotions in standing epochs make it surely: waited for without a limit).
  static constexpr std::uint8_t kMaxRoomWaits = 4;
  // Holds given up before moves are turned off for the process: a program whose queued work waits for
  // work queued after it (across streams or threads) would otherwise stall for hold_timeout each epoch.
  static constexpr std::uint64_t kMaxHoldsGivenUp = 2;

  Mover(const driver::Table& driver, pool::Pool& pool, StreamRegistry& streams, MoverConfig config = {});
  ~Mover();  // stops the thread (after its epoch: the streams are never left held)
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Asks for the pieces covering [p, p + bytes) to move to `to`, at the next epoch. False when the
  // queue is full or moves are off (the request is dropped: a move is only ever an optimization).
  bool request(CUdeviceptr p, std::size_t bytes, pool::Tier to);
  // One epoch on the calling thread: the requests queued so far, up to a batch, for one device.
  // CUDA_SUCCESS also when nothing was queued; NOT_READY: put off (a graph capture), still queued.
  CUresult run_epoch();
  // The same without waiting for the copies (overlap): starts an epoch, or ends the one whose copies
  // have finished. NOT_READY while copies go on (or another thread runs an epoch). For a caller that
  // drives the mover between its own launches (the modeled benchmarks).
  CUresult poll();
  // Whether requests are queued (a hint, read without the lock: UVMPOOL_TIERING_EPOCHS=launch polls on
  // the launching thread only then).
  bool queued() const { return queued_.load(std::memory_order_relaxed); }
  // Whether the launching thread runs the epochs now (Tiering::after_launch polls): config's
  // on_launch, or, with a thread of the mover's own, what the policy's trial chose
  // (UVMPOOL_TIERING_EPOCHS=measure, period_trial.h). While it does, the mover's thread only completes
  // the holds it placed before and places none; the launching thread runs one hold at a time.
  bool on_launch() const { return on_launch_.load(std::memory_order_relaxed); }
  void set_on_launch(bool on);
  // Epochs on the calling thread until nothing is queued (or an epoch is put off).
  CUresult run_until_idle();
  // Holds ahead, on the calling thread (the mover's thread does the same when holds_ahead > 1):
  // place_epoch prepares the requests queued so far, up to a batch, and places their hold without
  // waiting for it (NOT_READY: put off, or holds_ahead holds stand already); complete_placed ends the
  // first standing epoch once the program's work reached its hold (with `wait`, it waits for that;
  // NOT_READY: not yet). CUDA_SUCCESS from complete_placed also when none stands.
  CUresult place_epoch();
  CUresult complete_placed(bool wait);
  std::size_t standing_holds() const { return standing_.load(std::memory_order_relaxed); }
  // Whether requests are prepared when the program's work reaches their hold (holds ahead), in the
  // program's order after every earlier request, rather than when they are taken.
  bool prepares_at_hold() const { return (pipelined() || ordered()) && config_.prepare_at_hold; }
  // The marks the launches shown to the policy record (Tiering), which tell a busy device from a
  // stuck hold.
  ProgressMarks& progress() { return progress_; }
  // Stops the thread (at exit, before the driver goes away); requests are then only queued.
  void stop();

  // With overlap: whether moves are published (launches must then be read and ordered).
  bool copying() const { return flight_count_.load(std::memory_order_seq_cst) != 0; }
  // With overlap, on the launching thread inside the submission gate, right before its driver call:
  // the flag value work touching `touches` must wait for (0: none). `all`: its pointers are not all
  // known, so it waits for every published move.
  std::uint32_t order_value(const LaunchTouches& touches, bool all);
  // The flag, as the device sees it (for the caller's cuStreamWaitValue32); 0 before the first epoch.
  CUdeviceptr flag_device() const { return flag_device_seen_.load(std::memory_order_acquire); }
  // On the host, until the flag reaches `value` (where the wait could not be queued on a stream).
  void wait_released(std::uint32_t value);

  // Whether a request overlapping [p, p + bytes) is still to be carried out (queued, or in an epoch
  // not ended): the policy's way to tell a move still coming from one refused or dropped.
  bool outstanding(CUdeviceptr p, std::uint64_t bytes);

  MoverStats stats() const;
  const MoverConfig& config() const { return config_; }

 private:
  struct Request {
    CUdeviceptr address;
    std::size_t bytes;
    pool::Tier to;
    std::uint8_t room_waits = 0;  // epochs it was put back for, waiting for room demotions make
  };
  struct Held {  // the events of one hold or fence, each in the context it was recorded in
    struct Recorded {
      CUcontext context;
      CUevent event;
      bool owned = true;  // false: a retiring stream's, lent by the registry (given back by wait_for, forget)
    };
    std::vector<Recorded> events;
    // Pool::free_mark(), read before the first event is recorded: a mapping whose free began before
    // it was used only by work submitted before its free (the program's order), so before every
    // event here (a launch still in the driver when the mark is read returns before its thread can
    // free), and a copy behind the events need not carry it (Pool::copy_move).
    std::uint64_t frees_before = 0;
  };
  // The epoch under way: from begin (prepared; with overlap, copies enqueued) to finish.
  struct Epoch {
    bool active = false;
    // Holds ahead: requests to prepare when the program's work reaches the hold (take_for_hold).
    std::vector<Request> waiting;
    int device = -1;
    std::vector<Request> taken;
    std::vector<pool::Move> moves;
    std::vector<char> copied;
    // Held copies: an event recorded after each move's copy (the device's copy_events, borrowed), so
    // that each move commits as soon as its own copy is done, beside the copies still running.
    std::vector<CUevent> copy_done;
    Held fence;
  };

  // An epoch whose hold stands (holds ahead), or whose ordered copies run (overlap; `hold` then holds
  // the events after its copies): from place_epoch to complete_placed.
  struct Placed {
    Epoch epoch;
    std::uint32_t value = 0;  // the flag's value that releases it
    Held hold;                // the events recorded before the wait, on every stream
    bool standing = false;    // false: a stream refused; released in its turn, nothing committed
    bool given_up = false;    // did not drain within the hold timeout once first: released, nothing committed
    bool copying = true;      // overlap: its copies are enqueued (false: prepared at the hold, not yet)
    std::chrono::steady_clock::time_point first_since{};  // when it became the first standing
    std::uint64_t marks_passed = 0;  // ProgressMarks::passed() then, or at its last extension
  };

  bool take_batch(std::vector<Request>* batch);
  // Requests carried out or given up for good: no longer outstanding.
  void settle(const Request& r);
  void settle(const std::vector<Request>& requests);
  static std::size_t direction(pool::Tier to) { return to == pool::Tier::Device ? 1 : 0; }
  CUresult begin() UVMPOOL_REQUIRES(epoch_mu_);
  CUresult prepare_epoch() UVMPOOL_REQUIRES(epoch_mu_);  // begin's work; begin sets the step after it
  // Prepares `batch` into the epoch (demotions first); what may be prepared later (a promotion refused
  // for room that demotions coming may make, memory of another device) goes to `later`. `held`: a
  // hold of the mover's stands, so nothing may wait for the device (no fence).
  void prepare_requests(std::vector<Request> batch, bool held, std::vector<Request>* later) UVMPOOL_REQUIRES(epoch_mu_);
  CUresult start_epoch() UVMPOOL_REQUIRES(epoch_mu_);  // the prepared epoch made active
  static bool demotes(const Epoch& e);  // some request of it, prepared or waiting, goes to host memory
  using Range = std::pair<CUdeviceptr, std::size_t>;
  // The runs of the request's range whose pieces lie in the other tier now (the pool moves one tier at a time).
  std::vector<Range> runs_to_move(const Request& r) const;
  // Holds ahead: an epoch of requests taken now and prepared when the program's work reaches its
  // hold (prepare_waiting), after every earlier epoch committed.
  CUresult take_for_hold() UVMPOOL_REQUIRES(epoch_mu_);
  void prepare_waiting() UVMPOOL_REQUIRES(epoch_mu_);
  bool copies_done(bool wait) UVMPOOL_REQUIRES(epoch_mu_);
  // Ends the epoch begun: holds (unless `placed`, whose hold stands already), copies, commits, releases.
  CUresult finish(Placed* placed = nullptr) UVMPOOL_REQUIRES(epoch_mu_);
  // An ended epoch's moves counted as committed or failed by their results (in the epoch's order).
  void count_results(const Epoch& done, std::span<const CUresult> results);
  CUresult place_locked() UVMPOOL_REQUIRES(epoch_mu_);
  CUresult complete_locked(bool wait) UVMPOOL_REQUIRES(epoch_mu_);
  // The first standing epoch closes the host-wait gate (and one placed after a release opened it):
  // false when calls stayed inside past the gate's patience (the gate is left open a while).
  bool close_gate_for_epoch() UVMPOOL_REQUIRES(epoch_mu_);
  bool drained(Placed& p) UVMPOOL_REQUIRES(epoch_mu_);  // the program's work reached its hold
  void give_up_placed() UVMPOOL_REQUIRES(epoch_mu_);   // at stop: every standing hold released, moves aborted
  // The first standing epoch taken out; the next one's timeout starts now.
  Placed pop_placed() UVMPOOL_REQUIRES(epoch_mu_);
  CUresult pipeline_step() UVMPOOL_REQUIRES(epoch_mu_);  // the thread's round with holds ahead
  bool pipelined() const { return config_.holds_ahead > 1 && !config_.overlap; }
  bool ordered() const { return config_.overlap; }
  // With overlap: place_locked's and complete_locked's work (see "With `overlap`" above).
  CUresult place_ordered() UVMPOOL_REQUIRES(epoch_mu_);
  CUresult complete_ordered(bool wait) UVMPOOL_REQUIRES(epoch_mu_);
  // Its moves' owners (prepared at the hold: its requests'), for order_value.
  void publish(const Epoch& e, std::uint32_t value);
  // Prepared at the hold: the epoch's requests prepared once the work before its fence is done and
  // the epochs before it committed, their copies enqueued (events in `p.hold`).
  void start_ordered_copies(Placed& p) UVMPOOL_REQUIRES(epoch_mu_);
  void unpublish(std::uint32_t value);
  // Every standing ordered epoch given up (not drained in time, or at stop): the ordered work goes on,
  // nothing of them commits; each is aborted once its copies are done.
  void give_up_ordered() UVMPOOL_REQUIRES(epoch_mu_);
  // Whether the device passed a progress mark since `*passed` (updated), counting the extension.
  bool still_progressing(std::uint64_t* passed);
  void note_given_up();    // a hold given up: logged, then counted
  void count_given_up();   // counted, and moves turned off after kMaxHoldsGivenUp
  void guard_main();       // the stall guard's thread (see "Holds ahead" above)
  CUresult poll_locked() UVMPOOL_REQUIRES(epoch_mu_);
  void abort_all() UVMPOOL_REQUIRES(epoch_mu_);
  void put_back(const std::vector<Request>& requests);
  CUresult put_off(const std::vector<Request>& requests) UVMPOOL_REQUIRES(epoch_mu_);
  bool capture_in_progress();
  CUresult ensure_resources(int device) UVMPOOL_REQUIRES(epoch_mu_);
  // Records an event on every fenced stream, and with `gate` a wait for the flag to reach `value`
  // behind it. False (nothing held) when a stream captures a graph or a stream refuses.
  bool record_on_streams(bool gate, std::uint32_t value, Held* held) UVMPOOL_REQUIRES(epoch_mu_);
  bool wait_for(Held* held);
  void forget(Held* held);  // its events destroyed without waiting for them
  class Watchdog;  // gives a hold up after MoverConfig::hold_timeout (mover.cpp)
  void release(std::uint32_t value) UVMPOOL_REQUIRES(epoch_mu_);
  // `mark`: record Epoch::copy_done after each move's copy. `frees_before`: the hold's or fence's
  // Held::frees_before, which the copies run behind (freed mappings before it are not copied).
  CUresult enqueue_copies(const Held* after, bool mark, std::uint64_t frees_before) UVMPOOL_REQUIRES(epoch_mu_);
  void thread_main();
  void wake_thread();
  // Says what the mover does from now (MoverStats::step); the same step again keeps its start.
  void set_step(MoverStep step);

  const driver::Table& d_;
  pool::Pool& pool_;
  StreamRegistry& streams_;
  const MoverConfig config_;
  // Told of the pool's waits for the device (installed in the pool from construction to destruction).
  HoldBreaker breaker_;

  Mutex queue_mu_;
  std::deque<Request> queue_ UVMPOOL_GUARDED_BY(queue_mu_);
  std::atomic<bool> queued_{false};  // !queue_.empty(), written under queue_mu_, read without it (queued())
  std::atomic<bool> on_launch_{false};  // on_launch(): written by set_on_launch, read by the threads' rounds
  // Requests not settled yet, by address (a count: the same address may be asked twice).
  std::map<CUdeviceptr, std::uint32_t> outstanding_ UVMPOOL_GUARDED_BY(queue_mu_);
  std::condition_variable queue_cv_;
  bool stopping_ UVMPOOL_GUARDED_BY(queue_mu_) = false;
  std::thread thread_ UVMPOOL_GUARDED_BY(queue_mu_);
  std::condition_variable guard_cv_;                 // wakes the stall guard at stop (queue_mu_)
  std::thread guard_ UVMPOOL_GUARDED_BY(queue_mu_);  // with thread_, when holds are placed ahead
  // Since when (steady_clock, ns) a hold has stood without the mover releasing one; 0: none stands.
  // Written under epoch_mu_ (place_locked, release) and by the guard, read by the guard.
  std::atomic<std::int64_t> oldest_hold_ns_{0};

  // One epoch at a time (the thread's or a caller's of run_epoch).
  Mutex epoch_mu_;
  std::uint32_t epoch_ UVMPOOL_GUARDED_BY(epoch_mu_) = 0;
  volatile std::uint32_t* flag_ UVMPOOL_GUARDED_BY(epoch_mu_) = nullptr;  // pinned; streams wait on it
  CUdeviceptr flag_device_ UVMPOOL_GUARDED_BY(epoch_mu_) = 0;
  struct DeviceResources {
    CUcontext context = nullptr;  // the device's primary context (retained)
    // The mover's copy streams in it, one per direction (to the host, to the device), so that the
    // two directions run on two copy engines and both PCIe directions at once.
    std::array<CUstream, 2> copy{nullptr, nullptr};
    std::vector<CUevent> copy_events;  // for Epoch::copy_done, made as epochs need more, kept
  };
  std::vector<DeviceResources> devices_ UVMPOOL_GUARDED_BY(epoch_mu_);
  Epoch epoch_state_ UVMPOOL_GUARDED_BY(epoch_mu_);
  std::deque<Placed> placed_ UVMPOOL_GUARDED_BY(epoch_mu_);  // standing holds, oldest first
  std::atomic<std::size_t> standing_{0};                      // placed_.size(), read without the lock
  static constexpr int kMaxPutOffs = 1000;
  static constexpr std::chrono::milliseconds kMinGateBackoff{10}, kMaxGateBackoff{200};
  // After a close of the gate that found calls staying inside: no hold is placed before gate_retry_at_.
  std::chrono::milliseconds gate_backoff_ UVMPOOL_GUARDED_BY(epoch_mu_){0};
  std::chrono::steady_clock::time_point gate_retry_at_ UVMPOOL_GUARDED_BY(epoch_mu_){};
  int put_offs_ UVMPOOL_GUARDED_BY(epoch_mu_) = 0;  // epochs put off in a row
  // The breaker's count of gate openings when this mover last closed the gate (HoldBreaker::may_hold).
  std::uint64_t gate_opens_ UVMPOOL_GUARDED_BY(epoch_mu_) = 0;

  // With overlap: the owners of the standing epochs' moves, each with its epoch's value (order_value).
  struct Flight {
    std::uintptr_t owner;
    std::uint32_t value;
  };
  Mutex flights_mu_;
  std::vector<Flight> flights_ UVMPOOL_GUARDED_BY(flights_mu_);
  std::atomic<std::size_t> flight_count_{0};       // flights_.size(), read without the lock (copying())
  std::atomic<CUdeviceptr> flag_device_seen_{0};   // flag_device_, for the launching threads
  std::atomic<const volatile std::uint32_t*> flag_host_seen_{nullptr};  // flag_, for wait_released

  std::atomic<std::uint64_t> requested_{0}, refused_{0}, epochs_{0}, postponed_{0}, moves_{0}, promoted_{0},
      demoted_{0}, failed_{0}, held_ns_{0}, given_up_{0}, extended_{0};
  ProgressMarks progress_;
  std::atomic<bool> off_{false};
  std::atomic<MoverStep> step_{MoverStep::Idle};
  std::atomic<std::int64_t> step_since_ns_{0};  // step_clock's time when step_ began
  std::array<std::atomic<std::uint64_t>, kMoverSteps> step_ns_{};  // summed per step as it ends (MoverStats::step_us)
};

}  // namespace uvmpool::tiering
