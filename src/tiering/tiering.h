// Tiering: moving what kernels are about to touch into device memory ahead of them, and cold memory
// out, at the same addresses (docs/tiering.md). This layer sits between the hooks and the pool.
//
// Seeing: every launch route (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel and their
// per-thread variants) calls before_launch (copies and memsets before_transfer, graph launches
// before_graph_launch; what graphs touch is recorded as they are captured or built, graph_touches.h), which reads the launch's argument bytes (launch_args.h,
// param_layouts.h) and looks every 8-aligned word up in the pool's address map (Pool::probe,
// lock-free), and after_launch once the driver has it. While no pool memory lies in host memory and
// no overlapped move is copying, nothing a kernel touches can need moving or spoil a move, and
// before_launch returns after two loads.
// Moving: the policy (policy.h) learns the launch sequence from what after_launch reports and asks
// the mover (mover.h) for moves, which it makes in batches while it holds the program's streams
// still; prefetches ask for moves too, and advice steers the policy (advice.h).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "driver/driver_api.h"
#include "pool/pool.h"
#include "tiering/advice.h"
#include "tiering/graph_touches.h"
#include "tiering/mover.h"
#include "tiering/param_layouts.h"
#include "tiering/pieces.h"
#include "tiering/policy.h"
#include "tiering/streams.h"
#include "tiering/touches.h"

namespace uvmpool::tiering {

// UVMPOOL_TIERING.
enum class Mode {
  Off,     // launches go straight to the driver: the hooks are not even handed out
  Remote,  // the default: launches are read and their touches counted; spilled memory is read in place
  Auto,    // as Remote, and the policy moves what launches touch ahead of them
};

// What before_launch saw of one launch, for after_launch.
struct LaunchSeen {
  enum class Read { Skipped, Read, Unread } read = Read::Skipped;  // Skipped: nothing could need it
  CUfunction function;
  LaunchTouches touches;
  // A function's first launch read here passes the host-wait gate (entered by before_launch, left by
  // after_launch): it may load the function's module, which waits for the device inside the driver.
  const ParamLayout* first_launch = nullptr;
  // Whether the launching thread may run an epoch after it (UVMPOOL_TIERING_EPOCHS=launch). Never
  // after a copy or memset: the transfer hooks call after_launch from inside the host-wait gate, the
  // launch hooks from outside it (hooks/shown.h passes it around the driver call alone). After every
  // few kernel launches (MoverConfig::launches_per_epoch), and after each graph launch, which carries
  // many kernels' work: measured on an H200 with one graph a layer (docs/gpu-results.md), an epoch
  // every 4 graph launches ran 1.14x slower than reading in place, one after each 5.3x faster.
  enum class EpochAfter : std::uint8_t { Never, Counted, Each } epoch_after = EpochAfter::Never;
  // Queued into a graph capture: it runs when the graph does, nothing to order now.
  bool captured = false;
};

// A copy, memset or stream memory operation the hooks saw (src/hooks/transfer_hooks.cpp,
// mem_op_hooks.cpp): the pool memory it reads or writes counts as a launch's touches, under a function
// id of its own (no CUfunction is that small).
enum class Transfer : std::uintptr_t { Copy = 1, Memset = 2, MemOp = 3 };
struct TransferRange {
  CUdeviceptr address;
  std::size_t bytes;
};

// The mover's and the policy's settings from the options (UVMPOOL_TIERING_*).
MoverConfig configured_mover();
PolicyConfig configured_policy();
std::optional<Mode> parse_mode(std::string_view text);
// The mode the options ask for (UVMPOOL_TIERING; Off also with UVMPOOL_POOL=0 or UVMPOOL_DISABLE).
Mode configured_mode();

struct Stats {
  std::uint64_t launches_read = 0;      // launches whose arguments were read (host memory was mapped)
  std::uint64_t launches_unread = 0;    // ... that could not be read (no parameter layout from the driver)
  std::uint64_t pointers = 0;           // pool pointers found in arguments
  std::uint64_t host_pointers = 0;      // ... lying in host memory
  std::uint64_t launches_in_place = 0;  // launches given host memory: they read it over PCIe
  std::uint64_t transfers_read = 0;     // copies and memsets on pool memory seen while host memory was mapped
  std::uint64_t transfers_in_place = 0; // ... reading or writing memory in the host tier, over PCIe
  std::uint64_t captured = 0;           // launches, copies and memsets recorded into a graph capture
  std::uint64_t graph_launches_read = 0;    // graph launches shown with their graph's touches
  std::uint64_t graph_launches_unread = 0;  // ... of graphs not known or not readable (graph_touches.h)
  std::uint64_t layouts_asked = 0;      // functions whose parameter layout the driver was asked for
  // The mover (mover.h) and the policy (policy.h).
  std::uint64_t moves = 0;              // committed
  std::uint64_t promoted_bytes = 0;     // moved to device memory
  std::uint64_t demoted_bytes = 0;      // moved to host memory
  std::uint64_t launches_ordered = 0;   // overlap: launches, copies, memsets queued behind a move's commit
  std::uint64_t ordered_on_host = 0;    // ... of which the launching thread waited for, the stream wait refused
  std::uint64_t moves_failed = 0;       // refused by the pool or a failing driver step (nothing lost)
  std::uint64_t epochs = 0;             // times the program's streams were held for commits
  std::uint64_t holds_given_up = 0;     // holds the watchdog ended (moves are off after kMaxHoldsGivenUp)
  std::uint64_t holds_extended = 0;     // hold timeouts waited past: the device still passed progress marks
  std::uint64_t holds_broken = 0;       // times standing holds were released for a pool wait (their moves dropped)
  std::uint64_t host_waits = 0;         // program calls that waited at the host-wait gate during holds
  std::uint64_t queue_waits = 0;        // launches, copies and memsets that waited for the device to catch up (run_ahead)
  // Now, not counts (what a program that seems stuck is waiting for): the mover's step (MoverStep) and
  // its age in whole seconds (Prometheus' base unit), the holds standing, whether the host-wait gate is closed and the calls waiting at it.
  std::uint64_t mover_step = 0;
  std::uint64_t mover_step_seconds = 0;
  std::uint64_t holds_standing = 0;
  std::uint64_t gate_closed = 0;
  std::uint64_t gate_waiting = 0;
  std::array<std::uint64_t, kMoverSteps> mover_step_us{};  // the mover's host time per step (MoverStats::step_us)
  std::uint64_t policy_period = 0;      // launches in the learned period (0: none, recency rules)
  std::uint64_t periods_learned = 0;    // times a period was learned (again: taken anew, or replaced)
  std::uint64_t periods_dropped = 0;    // times the learned period was dropped (the program changed)
  std::uint64_t periods_retaken = 0;    // times its copy was taken anew from the last period (tensors placed anew)
  std::uint64_t kept_in_place = 0;      // thrash-guard decisions: memory left in host memory, read in place
  std::uint64_t kept_by_advice = 0;     // promotions not asked for: the memory prefers the host (advice)
  std::uint64_t parts_promoted = 0;     // ... of which the part that fit the room there was was promoted
  std::uint64_t guard_trials = 0;       // thrash-guard trials begun (period_trial.h)
  std::uint64_t guard_off = 0;          // 1 while the thrash guard is off: single-use memory moves
  std::uint64_t epochs_trials = 0;      // trials of which thread runs the mover's epochs (period_trial.h)
  std::uint64_t epochs_on_launch = 0;   // 1 while the launching thread runs them (measured faster, or set)
  std::uint64_t prefetches = 0;         // prefetches of pool memory (cuMemPrefetchAsync, uvmpool_prefetch)
  std::uint64_t advice = 0;             // advice on pool memory (cuMemAdvise, uvmpool_advise)
};

class Tiering {
 public:
  // `driver`, `pool` and `streams` must outlive this (the process's do).
  Tiering(const driver::Table& driver, pool::Pool& pool, Mode mode, StreamRegistry& streams,
          MoverConfig mover = {}, PolicyConfig policy = {});
  ~Tiering();
  Tiering(const Tiering&) = delete;
  Tiering& operator=(const Tiering&) = delete;

  // The process's tiering once the process's pool exists; nullptr before, or when Mode is Off.
  static Tiering* process();
  static Tiering* existing();

  // Before a kernel launch reaches the driver, on the launching thread. `f` may be a CUkernel cast
  // to a CUfunction; null arguments are left for the driver to refuse. Fills `seen` (only its `read`
  // when it answers Skipped: the common case costs no more than two loads).
  void before_launch(CUfunction f, CUstream stream, void** params, void** extra, LaunchSeen* seen);
  // With overlap (mover.h), inside the submission gate right before the driver gets the launch, copy,
  // memset or graph launch: work touching a move whose copy runs gets a wait for its commit in front
  // of it, on its own stream.
  void order_behind_moves(const LaunchSeen& seen, CUstream stream);
  // After the driver took the launch (whatever it answered): a default stream's context is noted for
  // the mover's holds, and the policy is shown what it touched.
  // Never throws (Shown's destructor calls it).
  void after_launch(const LaunchSeen& seen, CUstream stream) noexcept;
  // A call that may load `f` lazily besides its launch (cuFuncGetAttribute / cuFuncSetAttribute,
  // cuKernelGetAttribute / cuKernelSetAttribute, cuFuncSetCacheConfig, the occupancy calls, cuFuncLoad;
  // src/hooks/host_wait_hooks.cpp): under `auto`, until the function is known to be loaded, it passes
  // the host-wait gate as a first launch does; once one such call or launch succeeded, none waits.
  // begin's answer goes to end (nullptr: nothing was entered).
  const ParamLayout* begin_loading_call(CUfunction f);
  void end_loading_call(const ParamLayout* layout, CUresult result);
  // Before a copy or memset reaches the driver, as before_launch: the pool memory of `ranges` (each
  // mapping or slab it crosses, once) becomes the touches. after_launch follows it. A range not in
  // pool memory (host memory, another allocator's) touches nothing.
  void before_transfer(Transfer kind, CUstream stream, std::span<const TransferRange> ranges, LaunchSeen* seen);
  // Before a cuGraphLaunch reaches the driver, as before_launch: the union of what the graph's work
  // touches (graph_touches.h), or an unread launch for a graph not known. after_launch follows it.
  void before_graph_launch(CUgraphExec exec, CUstream stream, LaunchSeen* seen);
  // What a graph node names of pool memory, for graph_touches.h (src/tiering/graph_nodes.cpp). A kernel
  // node: its argument words that are pool pointers; false when the function's parameter layout is not
  // known (the node is unreadable).
  bool node_ranges(const CUDA_KERNEL_NODE_PARAMS& node, std::vector<GraphTouches::Range>* out);
  // A memcpy or memset node (transfer_ranges.h made the ranges): those that start in pool memory, as a
  // captured copy's are recorded.
  void node_ranges(std::span<const TransferRange> ranges, std::vector<GraphTouches::Range>* out) const;
  // A node of the generic calls (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), by its
  // type: kernel, memcpy, memset and memory-operation nodes as above (a memory operation's words:
  // transfer_ranges.h); host, empty, event, external semaphore and graph memory (allocation, free) nodes
  // name none of the program's pool memory; false (unreadable) for types newer than this build. Child graph and conditional nodes are the caller's
  // (GraphTouches::add_child, add_conditional: their graphs' records): false here.
  bool node_ranges(const CUgraphNodeParams& node, std::vector<GraphTouches::Range>* out);
  // How node_ranges reads a generic node of `type` (with no tiering yet, a hook needs only to know
  // whether it is readable).
  enum class NodeRead { Kernel, Memcpy, Memset, MemOp, Child, NamesNone, Unreadable };
  static NodeRead node_read(CUgraphNodeType type);
  // A prefetch of [p, end), which `allocations` cover (advice.h checked the call): with Auto, its pieces
  // not in `to`'s tier are asked of the mover (none for another device's memory). False when nothing
  // was asked: all of it lies there already, tiering is not Auto, or the mover's queue is full.
  bool prefetch(std::span<const pool::AllocationInfo> allocations, CUdeviceptr p, CUdeviceptr end, Place to);
  // Advice on `allocations` (advice.h): a preferred location, set or unset (a device's other than the
  // allocation's own is none), or (nullopt) advice that changes nothing; counted either way.
  void advise(std::span<const pool::AllocationInfo> allocations, std::optional<Preference> preference, int device);
  Preference preference(const pool::AllocationInfo& allocation) const { return advice_.preference(allocation); }
  // The preference the policy plans carved slot [slot, slot + bytes) with: that of the allocations in
  // it together (AdviceTable::shared), since the slot moves whole.
  Preference slot_preference(CUdeviceptr slot, std::size_t bytes) const;
  // After cuModuleUnload / cuLibraryUnload succeeded.
  void unloaded() { layouts_.forget_all(); }

  // What a launch touched, for tests now and for the policy next. Called on the launching thread for
  // each launch whose arguments were read; must not call the driver.
  using Observer = void (*)(void* context, CUfunction f, CUstream stream, const LaunchTouches& touches);
  void set_observer(Observer observer, void* context);

  Mode mode() const { return mode_; }
  Stats stats() const;
  Mover& mover() { return mover_; }
  PolicyStats policy_stats();
  // At exit (before the driver goes away): the mover's thread stops.
  void stop() { mover_.stop(); }

 private:
  const driver::Table& driver_;
  pool::Pool& pool_;
  const Mode mode_;
  StreamRegistry& streams_;
  ParamLayouts layouts_;
  Mover mover_;
  // The policy's view of the world: the pool's tiers and room, the mover's requests.
  class PoolWorld;
  std::unique_ptr<PoolWorld> world_;
  mutable Mutex policy_mu_;  // the policy is single-threaded; launches come from any thread
  std::unique_ptr<Policy> policy_ UVMPOOL_GUARDED_BY(policy_mu_);
  void show_policy(const LaunchSeen& seen, CUstream stream);
  // With UVMPOOL_TIERING_UNIT=piece: the policy's buffers are pieces of allocations (pieces.h).
  const bool cut_pieces_;
  // UVMPOOL_TIERING_EPOCHS=measure: the policy's epochs trial says which thread runs the mover's
  // epochs (Mover::set_on_launch, after each launch shown); with held copies. (Without the mover's
  // thread, its rounds are the caller's while the launching thread does not have them: tests.)
  const bool epochs_measured_;
  static constexpr std::uint64_t kPrunePiecesEvery = 4096;  // launches shown between prunes of the cuts
  Pieces pieces_ UVMPOOL_GUARDED_BY(policy_mu_){Pieces::kGranule};
  std::uint64_t pieces_shown_ UVMPOOL_GUARDED_BY(policy_mu_) = 0;
  // Once the policy has been shown PolicyConfig::unlearned_after launches without a period held (none
  // learned, or the one learned dropped), one warning (unlearned_step.h); looked at every
  // kUnlearnedCheckEvery launches shown. last_held_period_at_: the policy's launch count at the last
  // look that found a period.
  static constexpr std::uint64_t kUnlearnedCheckEvery = 256;
  const std::uint64_t unlearned_after_;
  std::uint64_t launches_shown_ UVMPOOL_GUARDED_BY(policy_mu_) = 0;
  bool unlearned_said_ UVMPOOL_GUARDED_BY(policy_mu_) = false;
  std::uint64_t last_held_period_at_ UVMPOOL_GUARDED_BY(policy_mu_) = 0;
  void say_if_unlearned() UVMPOOL_REQUIRES(policy_mu_);
  // While a hold stands, keeps the program's launching thread out of the driver once it is run_ahead
  // launches ahead of the device (MoverConfig::run_ahead, progress_marks.h). Under `auto` only.
  void wait_for_queue_room();
  // Asks the mover for the pieces of [from, end) on `device` not in `to`'s tier, a run of them at a
  // time, none larger than a batch (an epoch's hold grows with what it moves). False: none asked.
  bool ask_moves(CUdeviceptr from, CUdeviceptr end, pool::Tier to, int device);
  AdviceTable advice_;
  void trace_launch(const LaunchSeen& seen);  // UVMPOOL_TRACE's Launch and Touch events
  void after_launch_seen(const LaunchSeen& seen, CUstream stream);  // after_launch past the gate, may throw
  // The capture `stream` records into (its id), or 0; asks the driver only while a capture is under way.
  std::uint64_t capture_of(CUstream stream);
  // Adds the pool memory of [address, address + bytes) to `touches`, one touch per mapping or slab
  // crossed (what a move names), in host memory if any granule of it is.
  void add_range_touches(CUdeviceptr address, std::size_t bytes, LaunchTouches& touches);
  GraphTouches& graphs_ = GraphTouches::process();
  std::atomic<Observer> observer_{nullptr};
  std::atomic<void*> observer_context_{nullptr};
  std::atomic<std::uint64_t> launches_since_epoch_{0};  // kernel launches shown while moves were queued (on_launch)
  std::atomic<std::uint64_t> launches_read_{0}, launches_unread_{0}, pointers_{0}, host_pointers_{0},
      launches_in_place_{0}, transfers_read_{0}, transfers_in_place_{0}, prefetches_{0}, advice_calls_{0},
      captured_{0}, graph_launches_read_{0}, graph_launches_unread_{0}, queue_waits_{0}, launches_ordered_{0},
      ordered_on_host_{0};
};

}  // namespace uvmpool::tiering
