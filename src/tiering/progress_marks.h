// Whether the device is getting through the program's queued work: events recorded on the program's
// streams every few launches, and the newest of them the device has passed.
//
// Why: a hold that does not drain within the hold timeout is given up (mover.h), since work queued
// before it may wait for work queued after it (a collective whose other half another rank holds back:
// DDP on two H200s, docs/gpu-results.md). But a job whose kernels read much of their memory in place
// over PCIe may simply need longer. Measured on an H200 (2026-11-28, scoreboard row 7: a 3B-parameter
// model fine-tuned at half its memory, 14 s a step and 37 s the first): four holds were given up and
// tiering never moved a byte. A hold whose earlier work still passes marks is waiting for a busy
// device, not for itself; only one under which no mark passes for a whole hold timeout is given up.
//
// The marks are recorded as the policy is shown launches (Tiering, `auto` mode), not while a capture
// is under way (the event would join the graph), and only in the context of the first mark (as
// PeriodClock's). A mark recorded after a hold never passes while the hold stands, which is as it
// should be. The ring holds kSlots marks, every `every` launches: 8192 launches at the default
// (MoverConfig::progress_every, 128), more than PyTorch queues ahead of the device; a mark overwritten
// before the device passed it is lost, which can only make a hold look stuck (the old behaviour). A
// mark costs a cuEventRecord (1.4 us on an H200) on the launching thread, made only while launches
// are read (memory in host memory, or a move under way); every 32nd launch changed the simulator's
// modeled decoding row (8 holds ahead, 6.226 to 6.715 ms a step) through the thrash guard's trial,
// every 128th leaves every row as it was.
//
// The same marks bound how far the program runs ahead of the device while a hold stands (Tiering's
// queue-room wait). Measured on an H200 with driver 580 (tests/gpu/hold_blocking.cu, 2026-11-28): a
// stream takes 1020 launches behind an unwritten cuStreamWaitValue32, whatever their parameter size;
// the next launch waits inside the driver for room, and while it waits the mover's copies and VMM
// calls wait too (event and stream queries, event synchronizes and context pushes do not). Row 7's
// job keeps its queue full (the device reads host memory in place, far behind the launching thread),
// so every hold met a launch waiting for room: the hold's copies could not start, and every hold was
// given up. launches_ counts the launches shown (not those into a capture, which queue nothing); each
// mark remembers that count, so `outstanding()` (launches shown minus the count at the newest mark
// passed) bounds from above how many of them the device has not finished, to within the launches of
// other contexts (counted, never marked). Thread-safe: marks come from the program's threads (under
// the policy's lock), queries from the mover's and from launching threads waiting for room.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::tiering {

class ProgressMarks {
 public:
  ProgressMarks(const driver::Table& d, std::uint64_t every) : d_(d), every_(every == 0 ? 1 : every) {}
  ~ProgressMarks();
  ProgressMarks(const ProgressMarks&) = delete;
  ProgressMarks& operator=(const ProgressMarks&) = delete;

  // A launch was just queued on `stream` by the calling thread: every `every`-th records a mark behind
  // it; the others only count (no lock, no driver call). One into a capture is not counted.
  void launched(CUstream stream, bool capturing);
  // The newest mark the device has passed (marks are numbered from 1; 0: none yet). Only grows.
  std::uint64_t passed();
  // Launches shown that the device may not have finished, as of the last passed() (no driver call).
  std::uint64_t outstanding() const {
    // In this order: a count read after the mark it belongs to is never below it.
    const std::uint64_t done = completed_.load(std::memory_order_acquire);
    const std::uint64_t shown = launches_.load(std::memory_order_relaxed);
    return shown > done ? shown - done : 0;
  }

 private:
  static constexpr std::size_t kSlots = 64;
  struct Slot {
    CUevent event = nullptr;
    std::uint64_t mark = 0;    // the mark it holds now (0: none)
    std::uint64_t launch = 0;  // launches_ when it was recorded
  };

  const driver::Table& d_;
  const std::uint64_t every_;
  Mutex mu_;
  std::atomic<std::uint64_t> launches_{0};   // counted outside the lock: most launches record nothing
  std::atomic<std::uint64_t> completed_{0};  // the newest passed mark's launch count (written under mu_)
  std::uint64_t recorded_ UVMPOOL_GUARDED_BY(mu_) = 0;  // marks recorded
  std::uint64_t passed_ UVMPOOL_GUARDED_BY(mu_) = 0;
  std::array<Slot, kSlots> slots_ UVMPOOL_GUARDED_BY(mu_){};
  CUcontext context_ UVMPOOL_GUARDED_BY(mu_) = nullptr;  // the events' context (null: none made yet)
  bool failed_ UVMPOOL_GUARDED_BY(mu_) = false;          // a driver error: no more marks
};

}  // namespace uvmpool::tiering
