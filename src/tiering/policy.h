// The policy: what to move, and when, from the launches alone (docs/tiering.md).
//
// Training steps and decoding steps repeat one launch sequence on the same addresses (PyTorch's
// caching allocator hands out the same blocks every iteration). The policy learns that sequence:
//
//   - Every launch gets a signature: its function and the pool pointers it was given, in order (but
//     those into small buffers, see below). A
//     period P is a candidate when a launch's signature was last seen P launches ago; it is proven
//     once P launches (and at least min_repeat) matched the launch P before them, with at most one
//     in 32 not matching (and one more: a young candidate's first miss does not end it; on the
//     decoding job below, without it, the token's period was learned a token later and then replaced
//     by twice itself) and never max_misses in a row.
//   - Several candidates (kCandidates) are followed at once, always, also while a period is learned,
//     over a history of the last max_period launches. Why: a step holds loops of its own. Measured
//     on an H100 (16-layer training, docs/tiering.md): AdamW's foreach kernels launch ~50 times in a
//     row, each with all but one pointer of the one before, a period of 1 that was learned every
//     step, dropped 16 launches later, and took the history with it, so the 503-launch step was never
//     learned. The candidate proven that explained the most launches is learned, and replaces a
//     learned period that explained fewer: not the loop (fewer launches), nor a multiple of the step
//     found later (on the same GPU the step was learned as 1006 launches when the longest won).
//   - A launch may come in another place one step than the next: PyTorch's autograd thread launches
//     the backward while the main thread launches too, and the hooks see both in the order they
//     come. On that job one launch a step moved by about 20 places, and every launch between its two
//     places was off by one: more than max_misses in a row. So a launch that does not match its
//     repeat but matches the one after it counts as a match (the one expected comes later), and one
//     that matches neither is a miss that does not move the position (it may be one that came
//     early). A candidate's `lag` follows those shifts; a lag that stays off its period for a whole
//     period becomes the period.
//   - But a miss that runs the function expected is that launch on other pointers: the position
//     moves on. And after m misses in a row a launch is looked for up to m + 1 places ahead (the m
//     were others in place of those expected), if it passes a pointer that is not incidental (one
//     over small buffers alone has the same signature in every layer: in the decoding replay below
//     such a launch put the sequence a layer off). Measured on an H200 (scoreboard row 7, a 3B model,
//     data/row7-h200.launches): in every step a few launches ran their function on other pointers,
//     two or three in a row; the learned sequence stayed behind after the second and the 8341-launch
//     step was dropped 160 launches after it was learned, in every run. A candidate's lag follows
//     the same two rules.
//   - A period of the learned sequence that had launches it did not foresee, while a candidate of the
//     same length still proves the launches repeat, makes the policy take its copy anew from that
//     period (stats().periods_retaken): the next is planned from where the tensors are now (on row 7
//     the caching allocator placed activations anew until step 4). The copy keeps the count of
//     launches the learned sequence explained.
//   - A multiple of the learned period never replaces it: it matches wherever the learned one does
//     and where the program alternates between steps too, so it comes to explain more launches, but
//     with it every buffer is touched twice a period and the thrash guard keeps none in place.
//     Replayed from row 6's 64 tokens (an H200 trace), two tokens replaced the token after about 30.
//   - A launch matches another of the same function that shares all its pointers but one. Why not
//     exact: every aligned 8-byte word of the arguments is looked up, and some are numbers that only
//     happen to fall in the pool's addresses. Measured on an H100 (GPT-2 training, docs/tiering.md):
//     PyTorch's dropout passes its random-number offset, which grows every step, and once it reaches
//     the pool's range 92 of a step's 2285 launches showed a different "pointer" each step, so no
//     period was ever learned. The learned sequence keeps only the pointers both of the last two
//     steps passed, so such words are not planned for either.
//   - Small buffers are left out of the signature and of matching (incidental_bytes, 2 MiB: the
//     caching allocator's small segments). Measured on an H200 (GPT-2-XL decoding, batch 1,
//     tests/tiering/data/decode-h200.launches): a token is 1015 launches whose functions repeat, but
//     activations of a few KiB rotate among eight 2 MiB segments from token to token, and a linear
//     layer's launch (input, weight, output) shares only its 20 MiB weight with the one a token
//     before. Only 409 of 7344 launches repeated their signature a token later; the policy learned
//     84 periods of 20 to 80 launches (the layers), dropped 59, and ended with none. Small buffers
//     are still planned for (each learned launch keeps those both of its copies passed, as any
//     pointer): on that job the hot ones, 2 MiB segments spilled behind the weights and read in place
//     up to 686 times a token, are what learning the token lets the policy bring in.
//   - A launch whose function was first launched less than a period ago repeats nothing: it takes the
//     place of the launch a period before it, and is neither a match nor a miss. Measured on the
//     same job: one launch a layer (48 a token) ran a function first launched in that token, another
//     one each token, so a token repeated the one before it in 965 of its 1015 launches: one miss in
//     20, against the one in 32 tolerated, and no candidate lived.
//   - With a period learned, the policy knows each buffer's next use. Ahead of each launch it looks
//     `lookahead` launches further: a buffer those will touch that lies in host memory is promoted,
//     within a budget for promotions in flight. Room is made by demoting the device buffers whose next
//     use is farthest away (Belady's rule on the learned sequence), never ones needed before the
//     buffer promoted.
//   - Thrash guard: a buffer touched by only one launch a period and not able to stay (no room
//     without demoting others) is read in place instead: moving it costs its bytes twice over PCIe
//     (in and out), reading it in place once (GMEM's remote-access rule). "Touched by one launch" is
//     counted in bytes: each use reads from each pointer it passed to the next pointer the period
//     passes into the buffer (a caching allocator's segment holds tensors passed by their starts; a
//     carved slot, allocations); the guard holds while the period's uses together read no more than
//     one and a half times the buffer's bytes (Known::read_once).
//     Not for a kernel that reads its operand many times (a GEMM at a large batch): whether the
//     guard pays is measured, by timing the period with it on and off (period_trial.h).
//   - Which thread runs the mover's epochs (UVMPOOL_TIERING_EPOCHS=measure) is timed the same way,
//     once moves come (epochs_on_launch; Tiering tells the mover). One trial is timed at a time. A
//     guard kept on by a close call is tried again with the epochs on the launching thread, the two
//     ways that may pay only together (guard_decided).
//   - In the streams' order (World::in_stream_order: the mover prepares each move when the device
//     reaches the launch it was asked at, UVMPOOL_TIERING_PREPARE=hold): the policy plans from where
//     memory lies once every ask lands, which under run-ahead differs from where it lies now by up to
//     a step (a promoted buffer may be a victim before it landed, a demoted one promoted again), and
//     the in-flight budget counts the asks within the lookahead only. Modeled on the training replay,
//     233 -> 159 ms a step with 64 holds ahead (docs/tiering.md).
//   - Advice (advice.h): a buffer that prefers the device is never demoted to make room; one that
//     prefers the host is never promoted (it is read in place) and is the first to go for room.
//   - A launch that breaks the sequence counts as a miss; after `max_misses` in a row the period is
//     taken again from the history if the launches still repeat with it (the copy learned was taken
//     while the program warmed up), else forgotten.
//   - Without a period, recency: a host buffer a launch touched is promoted if there is room, or if
//     a cold buffer can go. Cold is unused for `cold_after` launches and for twice the longest time
//     the buffer ever went between two uses; least recently used goes first. Why not plain LRU:
//     before its step is learned a training job is a loop larger than the device, where the least
//     recently used buffer is the one needed next. Measured on an H100 (16-layer training,
//     docs/tiering.md): under LRU the steps before the period was learned were 1.5 to 2x slower than
//     reading in place (`remote`), and those after took 5 more steps to reach their speed; under this
//     rule no step was slower than `remote`'s. A
//     buffer outside the learned period is ranked the same way, not as never needed again: the
//     period learned may be a loop inside the step (the optimizer's), and the buffers outside it
//     are the rest of the step. A buffer demoted twice under recency is left in place.
//
// A buffer is an allocation, named by its base: pointers into one allocation (the tensors of one
// caching-allocator segment) are one buffer. Or, with UVMPOOL_TIERING_UNIT=piece, a piece of one:
// the allocation cut where launches passed pointers into it (pieces.h), so that a tensor moves
// without the rest of its segment. The policy is single-threaded: the caller serializes on_launch (Tiering holds a lock).
// It only asks (World::move): the mover decides whether a move can be made.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "pool/pool.h"
#include "tiering/period_trial.h"
#include "tiering/unlearned_step.h"

namespace uvmpool::tiering {

struct PolicyConfig {
  std::size_t lookahead = 32;                       // launches looked ahead for what to promote
  std::uint64_t in_flight_bytes = std::uint64_t{512} << 20;  // promotions asked for, not yet seen done
  std::size_t max_period = std::size_t{1} << 16;    // longest sequence learned (launches), and the launches
                                                    // kept to learn it from
  std::size_t max_misses = 16;                      // launches off the sequence before it is dropped
  std::size_t min_repeat = 32;                      // launches that must repeat before a period is learned
                                                    // (a short one too: the same launch twice is no period)
  // Buffers of at most this many bytes are left out of a launch's signature and of matching (see the
  // top of this file): PyTorch's caching allocator puts every tensor of 1 MiB or less in 2 MiB
  // segments, whose blocks change from one step to the next.
  std::uint64_t incidental_bytes = std::uint64_t{2} << 20;
  std::uint64_t cold_after = 4096;                  // launches a buffer outside any learned period must go
                                                    // unused (and twice its longest reuse) to be demoted
  PeriodTrialConfig guard;                           // the thrash guard: measured or fixed (period_trial.h)
  // Which thread runs the mover's epochs (period_trial.h): fixed on the mover's own unless Tiering
  // says measure (UVMPOOL_TIERING_EPOCHS=measure, with held copies).
  PeriodTrialConfig epochs{TrialSetting::First, 2, 0.9, 1.5, 8, 16, "mover's epochs", "on its thread", "on the launching thread"};
  // What a buffer is: whole allocations, or pieces of them (pieces.h). The caller cuts (Tiering::
  // show_policy); the policy plans for the buffers it is given either way.
  bool pieces = false;
  // Launches shown with no period held (never learned, or learned and dropped) before Tiering warns
  // once that the step is not learned (unlearned_step.h; 0: never).
  std::uint64_t unlearned_after = kUnlearnedStepLaunches;
};

// Where the program asked an allocation to lie (cuMemAdvise's preferred location; advice.h).
enum class Preference : std::uint8_t { None, Device, Host };

struct PolicyStats {
  std::uint64_t launches = 0;
  std::uint64_t periods_learned = 0;
  std::uint64_t period = 0;          // launches in the period learned now (0: none)
  std::uint64_t periods_dropped = 0;
  std::uint64_t periods_retaken = 0;  // the learned period's copy taken anew from the last period
  std::uint64_t promotions = 0;      // asked for
  std::uint64_t demotions = 0;
  std::uint64_t kept_in_place = 0;   // thrash-guard decisions: a buffer left in host memory, read in place
  std::uint64_t parts_promoted = 0;  // ... of which the part that fit the room there was was promoted
  std::uint64_t kept_by_advice = 0;  // promotions not asked for: the buffer prefers the host (advice)
  std::uint64_t waited_in_flight = 0;  // promotions put off, the in-flight budget spent (a launch each)
  std::uint64_t waited_room = 0;       // ... no room could be made for them
  PeriodTrialStats guard;             // the thrash guard's trials
  PeriodTrialStats epochs;            // the trials of which thread runs the mover's epochs (second: the launching thread's)
};

class Policy {
 public:
  // A buffer a launch touched.
  struct Buffer {
    CUdeviceptr address = 0;  // the pointer the launch passed
    CUdeviceptr base = 0;     // its allocation, or the piece of it the policy plans for (below)
    std::uint64_t bytes = 0;  // ... its bytes
    bool host = false;        // lies in host memory now
    Preference preference = Preference::None;
    // With pieces (UVMPOOL_TIERING_UNIT=piece, pieces.h), `base` and `bytes` name a piece of the
    // allocation and this its bytes: whether a pointer is incidental (matched on or not) is the
    // allocation's size's to say, not the piece's. 0: `bytes` are the allocation's.
    std::uint64_t allocation_bytes = 0;
  };
  // What the policy asks of the world (Tiering's answers are the pool's and the mover's; tests fake it).
  class World {
   public:
    virtual ~World() = default;
    virtual bool in_host(const Buffer& b) = 0;     // the buffer's tier now
    // Its bytes in host memory now: all or none, unless a move was cut short (some of its pieces moved).
    virtual std::uint64_t host_bytes(const Buffer& b) { return in_host(b) ? b.bytes : 0; }
    virtual std::uint64_t device_room() = 0;       // device bytes a promotion may take without a demotion
    virtual bool move(const Buffer& b, pool::Tier to) = 0;  // asks; false when refused at once
    // Asks to promote the part of the buffer in host memory that `room` bytes take, whole pieces
    // from its start. False when refused, or when not a piece fits.
    virtual bool promote_part(const Buffer&, std::uint64_t /*room*/) { return false; }
    // Whether a move asked for the buffer may still happen (false: carried out, refused or dropped).
    // Unknown by default: an ask is then taken as dropped only after a period.
    virtual bool moving(const Buffer&) { return true; }
    // Whether a move asked for lands where the program is now in its streams' order, prepared when
    // the device gets there (Mover::prepares_at_hold): the policy then plans from where memory lies
    // once every ask lands, not from where it lies now.
    virtual bool in_stream_order() { return false; }
    // The thrash guard's clock: period `n` of the learned sequence begins (its first launch was just
    // queued; numbers only grow). Answers the GPU time of an earlier period once the device has run
    // it, at most one a call. None by default: without a clock the guard stays on (period_trial.h).
    virtual std::optional<PeriodTrial::Time> period_started(std::uint64_t /*n*/) { return std::nullopt; }
  };

  Policy(World& world, PolicyConfig config = {});

  // A launch of `function` touching `buffers` (in argument order), before or as it is queued.
  void on_launch(std::uint64_t function, std::span<const Buffer> buffers);
  // Advice changed the preference of allocations (cuMemAdvise, uvmpool_advise), given in address order
  // without overlap: the buffers lying wholly inside one take it now rather than at their next touch,
  // so one advised to stay is not demoted meanwhile. A buffer shared with other allocations (a carved
  // slot) takes the preference its touches show. One pass over the known buffers, whatever the count.
  struct Advised {
    CUdeviceptr from = 0, end = 0;
    Preference preference = Preference::None;
  };
  void advised(std::span<const Advised> allocations);
  // Whether the mover's epochs should run on the launching thread in the period under way (the
  // epochs' trial: period_trial.h; Tiering tells the mover).
  bool epochs_on_launch() const { return !epochs_.first(); }

  PolicyStats stats() const { return stats_; }
  bool has_period() const { return !learned_.empty(); }
  std::size_t known_buffers() const { return known_.size(); }

 private:
  struct Launch {
    std::uint64_t signature;
    std::uint64_t function;
    std::vector<CUdeviceptr> buffers;  // every one it touched (planned for)
    std::vector<CUdeviceptr> keys;     // those above incidental_bytes (matched on)
    // The pointers it passed into each of `buffers` (index into them, pointer): where tensors begin
    // inside an allocation (adopt_period's estimate of what each use reads).
    std::vector<std::pair<std::uint32_t, CUdeviceptr>> pointers;
  };
  // Whether `now` repeats `before` (see the top of this file).
  bool matches(const Launch& before, std::uint64_t signature, std::uint64_t function,
               std::span<const Buffer> now) const;
  bool incidental(const Buffer& b) const {
    return (b.allocation_bytes != 0 ? b.allocation_bytes : b.bytes) <= config_.incidental_bytes;
  }
  struct Known {
    Buffer buffer;
    std::uint64_t last_touch = 0;       // launch count at its last touch
    std::uint64_t promotion_asked = 0;  // launch count when a promotion was asked (0: none pending)
    std::uint64_t demotion_asked = 0;   // ... a demotion
    std::uint64_t promotion_bytes = 0;  // device bytes the promotion asked takes (a part: less than bytes)
    std::uint64_t kept_at = 0;          // launch count when the thrash guard left it in place (0: never)
    std::uint64_t advice_counted_at = 0;  // launch count when advice last kept it in host memory, counted
    std::uint64_t refused_at = 0;       // ... when a promotion asked was seen refused or dropped (not asked
                                        // again within the lookahead: the mover would likely refuse again)
    std::uint64_t longest_gap = 0;      // the most launches between two of its uses seen
    std::uint32_t demotions = 0;        // under recency
    std::vector<std::uint32_t> uses;    // positions in the learned period (sorted)
    // Bytes its uses in the learned period read, together: each use the part of it from each pointer
    // the use passed to the next pointer any use passed (a tensor of a caching-allocator segment,
    // or an allocation in a carved slot, passed by its start), or to its end. A buffer of one
    // tensor: its bytes once a use.
    std::uint64_t period_reads = 0;
    // Read about once a period, all its uses together (the thrash guard's test): one use of all of it,
    // or uses of disjoint parts (the allocations sharing a carved slot), with up to half of it read
    // again. Why the half: a carved slot holds parts of two or three allocations, and one of them read
    // twice a period (GPT-2-XL's decode reads a third of its weights twice a token) made the whole
    // slot move each period (uvmpool-policy-replay tests/tiering/data/decode-h200.launches --slot=32:
    // 3.75 GiB moved in eight tokens, against 0.03 with the half and 0.98 by allocations). On an H200, row
    // 6a with 32 MiB slots moved 15.3 GB over the run before the half (2.5 stitched); with it, about 2.1
    // GB in five runs of six and 15.2 in one that ran four guard trials (docs/gpu-results.md, thirty-
    // second and thirty-third sessions), so the half is not all of that story. Below twice: a tensor read whole twice a period still moves, which pays in every
    // modeled replay (docs/tiering.md, "Thrash guard").
    bool read_once() const { return 2 * period_reads <= 3 * buffer.bytes; }
  };

  static constexpr std::uint64_t kPruneEvery = 4096;  // launches between two prunes of known_
  // Periods (or lookaheads) after which an ask not seen done is taken as dropped, when the world
  // cannot say whether it is still coming (World::moving).
  static constexpr std::uint64_t kAskHorizon = 4;
  void prune();
  struct Candidate {
    std::size_t period = 0;
    std::size_t lag = 0;     // how far back the next launch's repeat lies: the period, give or take a
                             // launch that came in another place
    std::size_t run = 0;     // launches that matched their repeat
    std::size_t misses = 0;  // ... and those that did not, tolerated (one in 32)
    std::size_t streak = 0;  // misses in a row (more than max_misses: not this period)
    std::size_t drift = 0;   // launches in a row with the lag off the period
  };
  // Adds the launch to the history and follows the candidates; returns the one proven (period 0: none).
  // `first_seen`: the launch count at its function's first launch. A function first launched within
  // the period repeats nothing there (see the top of this file).
  Candidate learn(std::uint64_t signature, std::uint64_t function, std::span<const Buffer> buffers,
                  std::vector<std::pair<std::uint32_t, CUdeviceptr>> pointers, std::uint64_t first_seen);
  // Each buffer's bytes read over the learned period (Known::period_reads), see adopt_period.
  void count_period_reads();
  // `again`: the same period, its copy taken anew from the last one (the guard's measure stands).
  void adopt_period(const Candidate& proven, bool again = false);
  // How many places past the one expected the launch matches the learned sequence (0: none within
  // reach of the misses in a row).
  std::size_t skipped_to(std::uint64_t signature, std::uint64_t function, std::span<const Buffer> now) const;
  // Whether a launch passes a pointer that is not incidental (its signature tells it from others of
  // its function).
  bool keyed(std::span<const Buffer> buffers) const;
  // A period of the learned sequence begins: the guard's trial hears of it.
  void period_begins();
  // The guard's trial decided in period `n`: whether to try it with the epochs elsewhere (see there).
  void guard_decided(std::uint64_t n);
  void drop_period();
  void plan_ahead();
  // Whether advice keeps `k` in host memory (counted, and remembered as the thrash guard's decisions are).
  bool kept_by_advice(Known& k);
  void plan_recency(std::span<const Buffer> buffers);
  // Device room for `bytes`, demoting buffers whose next use is after `needed_at` (farthest first);
  // with `needed_at` 0, least recently used first. False when not enough can go.
  bool make_room(std::uint64_t bytes, std::uint64_t needed_at);
  void find_victims(std::uint64_t needed_at);
  std::uint64_t next_use(const Known& k) const;  // in launches from the current position; ~0: never
  // Where the buffer lies once every move asked for it lands: the tier the program's next launches
  // will find, which under run-ahead may differ from where it lies now by a whole step.
  bool planned_host(const Known& k);
  // Whether a promotion (a demotion) of it may be asked for now: in the streams' order (World::
  // in_stream_order), by where it lies once the asks land; else by where it lies now, with no ask
  // pending.
  bool may_promote(const Known& k);
  bool may_demote(const Known& k);
  bool cold(const Known& k) const;  // unused long enough to go outside a learned period (see the top)
  // Bytes asked to move to the device (`to_device`) or to the host and not seen there yet; asks older
  // than a period (or the lookahead) are taken as dropped by the mover.
  static constexpr std::uint64_t kAllAsks = ~std::uint64_t{0};
  std::uint64_t pending_bytes(bool to_device, std::uint64_t within = kAllAsks);
  // device_room, counting what is asked and not done yet: promotions take room, demotions make it.
  std::uint64_t room();

  World& world_;
  bool stream_order_ = false;  // World::in_stream_order, as of the launch shown
  const PolicyConfig config_;
  PolicyStats stats_;
  std::uint64_t count_ = 0;  // launches seen

  // Learning: the last max_period launches, where each signature was seen last (positions count
  // every launch shown), and the periods being tried.
  static constexpr std::size_t kCandidates = 4;  // a step's period, and room for the loops inside it
  std::deque<Launch> history_;
  std::uint64_t history_start_ = 0;  // the position of history_.front()
  std::unordered_map<std::uint64_t, std::uint64_t> last_seen_;
  // Every function launched (as many as the program's kernels), with the launch count at its first.
  std::unordered_map<std::uint64_t, std::uint64_t> functions_;
  std::vector<Candidate> candidates_;

  // The learned period and the position in it.
  std::vector<Launch> learned_;
  std::size_t phase_ = 0;
  std::size_t misses_ = 0;
  std::size_t period_misses_ = 0;  // launches of this period of the learned sequence that it did not foresee
  std::size_t learned_run_ = 0;  // launches it explained (a candidate must explain more to replace it)

  // The thrash guard's and the epochs' trials (period_trial.h), one timed at a time: periods begun,
  // and the decisions and moves asked for when the last one began (what could matter to each).
  PeriodTrial guard_;
  PeriodTrial epochs_;
  std::uint64_t periods_begun_ = 0;
  std::uint64_t kept_at_period_ = 0;
  std::uint64_t moves_at_period_ = 0;
  bool guard_retried_ = false;  // the guard tried again since the period was learned, after the epochs moved
  // The guard tried again with the epochs moved to the launching thread for it (guard_decided), and
  // the period time of the guard on, on the mover's thread, that the pair must beat.
  bool pair_tried_ = false;
  std::uint64_t pair_reference_ns_ = 0;

  std::unordered_map<CUdeviceptr, Known> known_;
  std::vector<CUdeviceptr> asked_up_, asked_down_;  // buffers with a promotion / demotion asked
  // Per launch: the room (room_at_: the launch it was asked at) and the ranked victims.
  std::uint64_t room_ = 0, room_at_ = 0;
  std::vector<std::pair<std::uint64_t, CUdeviceptr>> victims_;
  std::size_t victims_taken_ = 0;
  std::uint64_t victims_at_ = 0;
};

}  // namespace uvmpool::tiering
