#include "sim/timeline.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "config/log.h"
#include "sim/address_space.h"
#include "sim/clock.h"
#include "sim/devices.h"
#include "sim/race_detector.h"
#include "sim/settings.h"
#include "sim/sim_control.h"
#include "sim/timeline_objects.h"

namespace uvmpool::sim {

void Touches::add_range(std::uintptr_t first, std::uintptr_t last) {
  if (first >= last) return;
  if (!ranges.empty() && ranges.back().second == first) {
    ranges.back().second = last;
    return;
  }
  ranges.emplace_back(first, last);
}

namespace timeline {
namespace {

// A device's shared resources: when each copy engine and each direction of the link is next free.
struct DeviceResources {
  std::vector<std::uint64_t> engines;
  std::uint64_t link_free[2] = {0, 0};
  std::uint64_t link_bytes[2] = {0, 0};
};

// What a drain learns that decides when a released value wait goes on: the virtual time at which the
// value it waited for was written. A value stream-written by cuStreamWriteValue was written at that
// work's end; one written by a host function at its end; any other (a plain store from a host thread)
// when the draining thread's host clock stood.
struct Written {
  std::uint64_t end;
  std::uint64_t value;
};

struct State {
  std::mutex mutex;  // guards everything below and every Stream and Event
  Objects objects;
  std::vector<DeviceResources> devices;
  std::map<std::uintptr_t, Written> value_writes;  // the last cuStreamWriteValue of each address
  std::atomic<int> queued{0};                       // streams with queued work (pump's fast test)
  std::uint64_t next_capture_id = 1;
  std::atomic<unsigned long long> work_count{0};
};

State& state() {
  static State* const instance = [] {
    auto* s = new State;  // never destroyed: calls may come during exit
    s->devices.resize(static_cast<std::size_t>(kMaxDevices));
    for (DeviceResources& d : s->devices) d.engines.assign(kCopyEngines, 0);
    return s;
  }();
  return *instance;
}

bool is_default(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

std::string stream_name(const Stream& s) {
  if (s.kind == StreamKind::Legacy) return "the legacy default stream";
  if (s.kind == StreamKind::PerThread) return "a per-thread default stream";
  return fmt::format("stream {}", static_cast<const void*>(&s));
}

// The stream a handle names for the calling thread. Caller holds the mutex.
CUresult resolve(State& st, CUstream handle, bool per_thread, Stream** out) {
  if (!is_default(handle)) {
    *out = st.objects.find_created(handle);
    return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  const bool thread_stream = handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread);
  *out = thread_stream ? st.objects.per_thread_stream(context) : st.objects.legacy_stream(context);
  return CUDA_SUCCESS;
}

// The legacy default stream waits for every blocking stream of its context, and they for it.
std::uint64_t implicit_order(State& st, const Stream& s) {
  std::uint64_t after = 0;
  if (s.kind == StreamKind::Legacy) {
    st.objects.for_each_stream([&](const Stream& other) {
      if (&other != &s && other.context == s.context && other.blocking()) after = std::max(after, other.tail);
    });
  } else if (s.blocking()) {
    if (const Stream* legacy = st.objects.find_legacy(s.context)) after = legacy->tail;
  }
  return after;
}

// When a piece of work at the front of `s` may start.
std::uint64_t earliest(State& st, const Stream& s, const Queued& w) {
  return std::max({w.submitted_at, s.tail, implicit_order(st, s)});
}

// Reserves `bytes` at `gbps` on one direction of the link from `from` on; returns the end.
std::uint64_t use_link(DeviceResources& d, int direction, std::uint64_t from, std::uint64_t bytes, double gbps) {
  if (bytes == 0) return from;
  const std::uint64_t start = std::max(from, d.link_free[direction]);
  d.link_free[direction] = start + clock::transfer_ns(bytes, gbps);
  d.link_bytes[direction] += bytes;
  return d.link_free[direction];
}

// The modeled end of work that starts at `start` and touched `t` (see docs/simulator.md).
std::uint64_t modeled_end(DeviceResources& d, WorkKind kind, std::uint64_t start, const Touches& t) {
  const Costs& c = clock::costs();
  if (kind == WorkKind::Copy) {
    // One copy engine, the earliest free; the link for what crosses it, each direction in parallel.
    auto engine = std::min_element(d.engines.begin(), d.engines.end());
    start = std::max(start, *engine);
    const std::uint64_t on_device = clock::transfer_ns(t.device_to_device, c.hbm_read_gbps) +
                                    clock::transfer_ns(t.device_to_device, c.hbm_write_gbps) +
                                    clock::transfer_ns(t.host_to_host, c.pageable_gbps);
    std::uint64_t end = start + c.copy_ns + on_device;
    std::uint64_t in = use_link(d, UVMPOOL_SIM_HOST_TO_DEVICE, start + c.copy_ns, t.to_device_pinned, c.copy_gbps);
    in = use_link(d, UVMPOOL_SIM_HOST_TO_DEVICE, in, t.to_device_pageable, c.pageable_gbps);
    std::uint64_t out = use_link(d, UVMPOOL_SIM_DEVICE_TO_HOST, start + c.copy_ns, t.to_host_pinned, c.copy_gbps);
    out = use_link(d, UVMPOOL_SIM_DEVICE_TO_HOST, out, t.to_host_pageable, c.pageable_gbps);
    end = std::max({end, in, out});
    *engine = end;
    return end;
  }
  if (kind == WorkKind::WriteValue) return start;
  // Kernels and memsets: HBM bytes at HBM speed beside the link's share for host memory read or
  // written in place.
  const std::uint64_t fixed = kind == WorkKind::Kernel ? c.kernel_ns : c.copy_ns;
  const std::uint64_t on_device =
      clock::transfer_ns(t.device_read, c.hbm_read_gbps) + clock::transfer_ns(t.device_write, c.hbm_write_gbps);
  const std::uint64_t in = use_link(d, UVMPOOL_SIM_HOST_TO_DEVICE, start, t.host_read, c.host_read_gbps);
  const std::uint64_t out = use_link(d, UVMPOOL_SIM_DEVICE_TO_HOST, start, t.host_write, c.host_write_gbps);
  return std::max({start + fixed + on_device, in + fixed, out + fixed});
}

struct Drain {
  std::uint64_t host_fn_end = 0;  // the end of the last host function this drain ran, if any
  bool host_fn_ran = false;
};

// When a value that satisfies a wait was written, as far as the simulator can tell (see Written).
// Caller holds the address space's lock (shared).
std::uint64_t written_at(State& st, const WorkSpec& wait, const Drain& drain) {
  if (auto it = st.value_writes.find(wait.address); it != st.value_writes.end() && wait.current() == it->second.value)
    return it->second.end;
  return drain.host_fn_ran ? drain.host_fn_end : clock::now();
}

// Executes the front of `s` if it can go; false if it must stay queued. May unlock `lock` to run a
// host function (which must be free to take the program's locks), relocking before it returns.
bool run_front(State& st, Stream& s, std::unique_lock<std::mutex>& lock, Drain& drain) {
  if (s.queue.empty() || s.in_host_fn) return false;
  Queued& w = s.queue.front();
  const Costs& c = clock::costs();
  std::uint64_t start = earliest(st, s, w);
  switch (w.type) {
    case Queued::Type::EventWait: {
      Event* e = st.objects.find_event(w.event);
      if (e != nullptr && e->unexecuted_records > 0) return false;
      if (e != nullptr) start = std::max(start, e->time);
      s.tail = start;
      break;
    }
    case Queued::Type::EventRecord: {
      if (Event* e = st.objects.find_event(w.event)) {
        e->time = start;
        --e->unexecuted_records;
      }
      s.tail = start;
      break;
    }
    case Queued::Type::Work: {
      WorkSpec& spec = w.spec;
      if (spec.kind == WorkKind::WaitValue) {
        std::shared_lock space_lock(AddressSpace::get().mutex);
        if (!spec.satisfied()) {
          w.waited = true;
          return false;
        }
        if (w.waited) start = std::max(start, written_at(st, spec, drain) + c.wait_value_ns);
        s.tail = start;
        break;
      }
      if (spec.kind == WorkKind::HostFunc) {
        s.in_host_fn = true;
        const CUhostFn fn = spec.host_fn;
        void* data = spec.host_data;
        lock.unlock();
        fn(data);
        lock.lock();
        s.in_host_fn = false;
        s.tail = start + c.host_func_ns;
        drain.host_fn_ran = true;
        drain.host_fn_end = s.tail;
        break;
      }
      Touches touches;
      CUresult result = CUDA_SUCCESS;
      {
        std::shared_lock space_lock(AddressSpace::get().mutex);
        result = spec.effect(s.context->device, touches);
      }
      if (result != CUDA_SUCCESS) {
        s.context->sticky.store(result, std::memory_order_release);
        log::error("{} on {} failed with {}: the context is now unusable, as on a GPU", spec.what,
                   stream_name(s), static_cast<int>(result));
      }
      DeviceResources& d = st.devices[static_cast<std::size_t>(s.context->device)];
      const std::uint64_t end = modeled_end(d, spec.kind, start, touches);
      if (spec.kind == WorkKind::WriteValue) st.value_writes[spec.address] = {end, spec.value};
      detector::record({s.context, s.context->device, stream_name(s), spec.what, start, end,
                        std::move(touches.ranges)});
      s.tail = end;
      break;
    }
  }
  st.work_count.fetch_add(w.type == Queued::Type::Work ? 1 : 0, std::memory_order_relaxed);
  s.queue.pop_front();
  if (s.queue.empty()) st.queued.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

// Runs everything that can run, on every stream, until nothing more can. Caller holds the lock.
void drain_all(State& st, std::unique_lock<std::mutex>& lock) {
  Drain drain;
  for (bool progress = true; progress;) {
    progress = false;
    // Streams are collected first: running a host function unlocks, and streams may come and go.
    std::vector<Stream*> busy;
    st.objects.for_each_stream([&](Stream& s) {
      if (!s.queue.empty()) busy.push_back(&s);
    });
    for (Stream* s : busy) {
      if (!st.objects.alive(s)) continue;
      while (run_front(st, *s, lock, drain)) progress = true;
    }
  }
  st.objects.drop_finished_orphans();
}

// Queues `item` on `s` and runs what can run. Caller holds the lock.
void enqueue(State& st, Stream& s, Queued item, std::unique_lock<std::mutex>& lock) {
  item.submitted_at = clock::now();
  if (s.queue.empty()) st.queued.fetch_add(1, std::memory_order_relaxed);
  s.queue.push_back(std::move(item));
  drain_all(st, lock);
}

// Whether another thread of this process could still write a value a stream waits for.
bool other_threads_exist() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return true;
  int threads = 0;
  while (dirent* entry = readdir(dir)) threads += entry->d_name[0] != '.';
  closedir(dir);
  return threads > 1;
}

// Whether `s` is the legacy stream while a blocking stream of its context captures: work on it would
// make it depend on the capture (the driver's CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which invalidates
// the capture, unless `spoil` is false: cuStreamIsCapturing's question spoils nothing).
bool implicit_in_capture(State& st, const Stream& s, bool spoil = true) {
  if (s.kind != StreamKind::Legacy) return false;
  bool found = false;
  st.objects.for_each_stream([&](Stream& o) {
    if (o.capturing && o.context == s.context && o.blocking()) {
      if (spoil) o.capturing->invalidated = true;
      found = true;
    }
  });
  return found;
}

// Leaves every stream of `capture` out of it.
void end_capture_on_streams(State& st, const std::shared_ptr<CaptureSeq>& capture) {
  capture->ended = true;
  st.objects.for_each_stream([&](Stream& o) {
    if (o.capturing == capture) {
      o.capturing.reset();
      o.capture_origin = false;
    }
  });
}

// Waits (in wall time, pumping) until no stream that `matters` has queued work. CUDA_SUCCESS, or
// CUDA_ERROR_LAUNCH_TIMEOUT where it would wait forever.
template <typename Matters>
CUresult wait_for_queues(State& st, std::unique_lock<std::mutex>& lock, Matters&& matters) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(clock::costs().hang_timeout_ms);
  for (;;) {
    // Asked before the drain, not after: a thread that writes the value and exits between the drain
    // and the question would otherwise leave this one alone with work that is no longer stuck.
    const bool alone = !other_threads_exist();
    drain_all(st, lock);
    const Stream* stuck = nullptr;
    st.objects.for_each_stream([&](const Stream& s) {
      if (stuck == nullptr && !s.queue.empty() && matters(s)) stuck = &s;
    });
    if (stuck == nullptr) return CUDA_SUCCESS;
    if (!stuck->in_host_fn && (alone || std::chrono::steady_clock::now() >= deadline)) {
      log::error("a synchronize would wait forever: {} waits for a value at {:#x} that nothing writes",
                 stream_name(*stuck), stuck->queue.front().spec.address);
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
}

// Threads waiting inside a copy for work that cannot run yet (submit_and_wait), and whether the calling
// thread is one.
std::atomic<int> g_inside_waiting{0};
thread_local bool t_inside_waiting = false;

class WaitingInside {
 public:
  explicit WaitingInside(bool keeps_others_out) : on_(keeps_others_out) {
    if (!on_) return;
    t_inside_waiting = true;
    g_inside_waiting.fetch_add(1, std::memory_order_seq_cst);
  }
  ~WaitingInside() {
    if (!on_) return;
    g_inside_waiting.fetch_sub(1, std::memory_order_seq_cst);
    t_inside_waiting = false;
  }
  WaitingInside(const WaitingInside&) = delete;
  WaitingInside& operator=(const WaitingInside&) = delete;

 private:
  bool on_;
};

// Measured on an H200 with driver 580 (tests/gpu/hold_blocking.cu, 2026-11-28): a stream took 1020
// launches behind a value nobody had written, with 8 or 512 bytes of parameters alike; the next launch
// waited inside the driver for room, and while it waited other threads' copies and VMM calls waited
// too, as behind a waiting copy (event and stream queries, event synchronizes and context pushes did
// not). Here each piece of work, event record and event wait queued takes one place, and a piece of
// work waits for room (records and waits do not: the mover's holds are made of them).
constexpr std::size_t kStreamRoom = 1020;

// Before work is queued on `s`: waits (in wall time, pumping, keeping the others out) while its queue
// is full. CUDA_ERROR_LAUNCH_TIMEOUT where it would wait forever; `s` may be gone when this returns
// (CUDA_ERROR_INVALID_HANDLE).
CUresult wait_for_room(State& st, Stream* s, std::size_t pieces, std::unique_lock<std::mutex>& lock) {
  const auto full = [&] { return s->queue.size() + pieces > std::max(kStreamRoom, pieces); };
  if (!full()) return CUDA_SUCCESS;
  const WaitingInside inside(true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(clock::costs().hang_timeout_ms);
  for (;;) {
    const bool alone = !other_threads_exist();
    drain_all(st, lock);
    if (!st.objects.alive(s)) return CUDA_ERROR_INVALID_HANDLE;
    if (!full()) return CUDA_SUCCESS;
    if (!s->in_host_fn && (alone || std::chrono::steady_clock::now() >= deadline)) {
      log::error("a launch would wait forever for room: {} holds {} pieces of work behind a value at {:#x} that "
                 "nothing writes",
                 stream_name(*s), s->queue.size(), s->queue.front().spec.address);
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
}
}  // namespace

CUresult submit(CUstream handle, bool per_thread, WorkSpec work) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing) {  // recorded, not run
    s->capturing->work.push_back(std::move(work));
    return CUDA_SUCCESS;
  }
  if (CUresult status = wait_for_room(st, s, 1, lock); status != CUDA_SUCCESS) return status;
  Queued item;
  item.type = Queued::Type::Work;
  item.spec = std::move(work);
  enqueue(st, *s, std::move(item), lock);
  return CUDA_SUCCESS;
}

CUresult submit_all(CUstream handle, bool per_thread, std::vector<WorkSpec> work) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing) {  // a graph launched into a capture: its work, recorded
    for (WorkSpec& w : work) s->capturing->work.push_back(std::move(w));
    return CUDA_SUCCESS;
  }
  if (CUresult status = wait_for_room(st, s, work.size(), lock); status != CUDA_SUCCESS) return status;
  // All queued before any runs: a host function among them drops the lock while it runs, and no other
  // thread's work may come between (a graph launch is one piece of work on its stream).
  const std::uint64_t now = clock::now();
  for (WorkSpec& w : work) {
    Queued item;
    item.type = Queued::Type::Work;
    item.spec = std::move(w);
    item.submitted_at = now;
    if (s->queue.empty()) st.queued.fetch_add(1, std::memory_order_relaxed);
    s->queue.push_back(std::move(item));
  }
  drain_all(st, lock);
  return CUDA_SUCCESS;
}

namespace {
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;  // the thread's interaction mode
std::atomic<bool> g_ever_captured{false};  // until the first capture, no call is looked at
}  // namespace

CUresult exchange_capture_mode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}

CUresult unsafe_call() {
  if (!g_ever_captured.load(std::memory_order_acquire) || t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_SUCCESS;
  State& st = state();
  std::lock_guard lock(st.mutex);
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  st.objects.for_each_stream([&](Stream& s) {
    if (!s.capturing || !s.capture_origin || s.capturing->ended) return;
    CaptureSeq& c = *s.capturing;
    const bool own = c.thread == me && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool others = c.thread != me && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                        t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (!own && !others) return;
    c.invalidated = true;
    forbidden = true;
  });
  return forbidden ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult not_capturing(CUstream handle, bool per_thread) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (!s->capturing) return CUDA_SUCCESS;
  s->capturing->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult begin_capture(CUstream handle, bool per_thread, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (s->kind == StreamKind::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // as the driver answers
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  auto capture = std::make_shared<CaptureSeq>();
  capture->id = st.next_capture_id++;
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  g_ever_captured.store(true, std::memory_order_release);
  s->capturing = std::move(capture);
  s->capture_origin = true;
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream handle, bool per_thread, std::vector<WorkSpec>* work, std::uint64_t* id) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (!s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  if (!s->capture_origin) {
    s->capturing->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  const std::shared_ptr<CaptureSeq> capture = s->capturing;
  end_capture_on_streams(st, capture);
  if (id != nullptr) *id = capture->id;
  if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *work = std::move(capture->work);
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream handle, bool per_thread, CUstreamCaptureStatus* status, std::uint64_t* id) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult r = resolve(st, handle, per_thread, &s); r != CUDA_SUCCESS) return r;
  if (implicit_in_capture(st, *s, false)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (!s->capturing) {
    *status = s->capture;  // uvmpool_sim_set_capture_status's answer, NONE by default
    if (id != nullptr) *id = 0;
    return CUDA_SUCCESS;
  }
  *status = s->capturing->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id != nullptr) *id = s->capturing->id;
  return CUDA_SUCCESS;
}


CUresult submit_and_wait(CUstream handle, bool per_thread, WorkSpec work, bool keeps_others_out) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing) {  // a synchronous call cannot be captured, and spoils the capture
    s->capturing->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  Queued item;
  item.type = Queued::Type::Work;
  item.spec = std::move(work);
  enqueue(st, *s, std::move(item), lock);
  drain_all(st, lock);
  // Only a wait for work that cannot run keeps the others out: a copy whose stream is free ends at once.
  const WaitingInside inside(keeps_others_out && !s->queue.empty());
  if (CUresult status = wait_for_queues(st, lock, [&](const Stream& other) { return &other == s; });
      status != CUDA_SUCCESS)
    return status;
  clock::wait_until(s->tail);
  return CUDA_SUCCESS;
}

CUresult wait_for_other_streams(CUstream handle, bool per_thread) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* own = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &own); status != CUDA_SUCCESS) return status;
  const auto matters = [&](const Stream& s) { return s.context == own->context && &s != own; };
  drain_all(st, lock);
  bool stuck = false;
  st.objects.for_each_stream([&](const Stream& s) { stuck = stuck || (matters(s) && !s.queue.empty()); });
  const WaitingInside inside(stuck);
  return wait_for_queues(st, lock, matters);
}

CUresult wait_for_context_streams(const Context* context) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  const auto matters = [&](const Stream& s) { return s.context == context; };
  drain_all(st, lock);
  bool stuck = false;
  st.objects.for_each_stream([&](const Stream& s) { stuck = stuck || (matters(s) && !s.queue.empty()); });
  const WaitingInside inside(stuck);
  return wait_for_queues(st, lock, matters);
}

CUresult wait_at_the_door() {
  if (g_inside_waiting.load(std::memory_order_seq_cst) - (t_inside_waiting ? 1 : 0) <= 0) return CUDA_SUCCESS;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(clock::costs().hang_timeout_ms);
  while (g_inside_waiting.load(std::memory_order_seq_cst) - (t_inside_waiting ? 1 : 0) > 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      log::error("a driver call waited {} ms for another thread's copy, which waits for a value nothing writes "
                 "(a GPU would wait until it is written)", clock::costs().hang_timeout_ms);
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return CUDA_SUCCESS;
}

void pump() {
  State& st = state();
  if (st.queued.load(std::memory_order_relaxed) == 0) return;
  std::unique_lock lock(st.mutex);
  drain_all(st, lock);
}

std::uint64_t device_busy_until(int device) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  std::uint64_t until = 0;
  st.objects.for_each_stream([&](const Stream& s) {
    if (s.context->device == device) until = std::max(until, s.tail);
  });
  return until;
}

std::uint64_t copies_busy_until(int device) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  const std::vector<std::uint64_t>& engines = st.devices[static_cast<std::size_t>(device)].engines;
  return *std::max_element(engines.begin(), engines.end());
}

CUresult stream_context(CUstream handle, bool per_thread, Context** out) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  *out = s->context;
  return CUDA_SUCCESS;
}

CUresult synchronize_context(const Context* context) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  // A capturing stream cannot be waited for: refused in every interaction mode, spoiling its capture
  // (measured on an H200).
  bool capturing = false;
  st.objects.for_each_stream([&](Stream& s) {
    if (s.context != context || !s.capturing) return;
    s.capturing->invalidated = true;
    capturing = true;
  });
  if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult status = wait_for_queues(st, lock, [&](const Stream& s) { return s.context == context; });
      status != CUDA_SUCCESS)
    return status;
  std::uint64_t until = 0;
  st.objects.for_each_stream([&](Stream& s) {
    if (s.context != context) return;
    until = std::max(until, s.tail);
    st.objects.end_hold(s);
  });
  clock::wait_until(until);
  return CUDA_SUCCESS;
}

void release_context(const Context* context) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  // As on a GPU, the context's work finishes first, and the caller waits for it (so the race detector
  // does not find it unfinished when the next context maps the same addresses); work that can never
  // run is dropped.
  (void)wait_for_queues(st, lock, [&](const Stream& s) { return s.context == context; });
  std::uint64_t until = 0;
  st.objects.for_each_stream([&](Stream& s) {
    if (s.context != context) return;
    until = std::max(until, s.tail);
    if (!s.queue.empty()) {
      s.queue.clear();
      st.queued.fetch_sub(1, std::memory_order_relaxed);
    }
  });
  st.objects.erase_context(context);
  clock::wait_until(until);
}

// H100's range, as cuCtxGetStreamPriorityRange reports it: 0 (least) to -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

CUresult create_stream(CUstream* out, unsigned flags, int priority) {
  if (out == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  auto s = std::make_unique<Stream>();
  s->context = context;
  s->flags = flags;
  // Out-of-range priorities are clamped, as the real driver does.
  s->priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  State& st = state();
  std::lock_guard lock(st.mutex);
  // A new stream is idle as of now: its work cannot start before it exists.
  s->tail = clock::now();
  *out = reinterpret_cast<CUstream>(st.objects.add_stream(std::move(s)));
  return CUDA_SUCCESS;
}

// The default streams are not destroyable. As on a GPU, work still queued on a destroyed stream runs
// when it can; its events complete, and the hold goes with the stream.
CUresult destroy_stream(CUstream handle) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = st.objects.find_created(handle);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capturing) {  // the capture cannot end well without it
    s->capturing->invalidated = true;
    if (s->capture_origin) end_capture_on_streams(st, std::shared_ptr<CaptureSeq>(s->capturing));
    s->capturing.reset();
  }
  st.objects.end_hold(*s);
  st.objects.remove_stream(s);
  return CUDA_SUCCESS;
}

CUresult query_stream(CUstream handle, bool per_thread) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->held || !s->queue.empty() || s->tail > clock::now()) return CUDA_ERROR_NOT_READY;
  clock::observed(s->tail);
  return CUDA_SUCCESS;
}

CUresult synchronize_stream(CUstream handle, bool per_thread) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing) {
    s->capturing->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // The legacy stream also waits for the blocking streams it is ordered after.
  if (CUresult status = wait_for_queues(st, lock, [&](const Stream& other) { return &other == s; });
      status != CUDA_SUCCESS)
    return status;
  if (!st.objects.alive(s)) return CUDA_SUCCESS;  // destroyed by another thread meanwhile
  clock::wait_until(std::max(s->tail, implicit_order(st, *s)));
  st.objects.end_hold(*s);
  return CUDA_SUCCESS;
}

CUresult wait_event(CUstream handle, bool per_thread, CUevent event) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  Event* e = st.objects.find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  // In a capture a wait is an edge of the graph: it joins the waiting stream to the event's capture.
  if (e->captured_in && !e->captured_in->ended) {
    if (s->capturing == e->captured_in) return CUDA_SUCCESS;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    s->capturing = e->captured_in;
    s->capture_origin = false;
    return CUDA_SUCCESS;
  }
  if (s->capturing) {  // a wait for work outside the capture
    s->capturing->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  Queued item;
  item.type = Queued::Type::EventWait;
  item.event = event;
  enqueue(st, *s, std::move(item), lock);
  return CUDA_SUCCESS;
}

CUresult capture_status(CUstream handle, bool per_thread, CUstreamCaptureStatus* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  if (implicit_in_capture(st, *s, false)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing)
    *out = s->capturing->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  else
    *out = s->capture;
  return CUDA_SUCCESS;
}

CUresult create_event(CUevent* out, unsigned flags) {
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (out == nullptr || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events cannot time.
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  auto e = std::make_unique<Event>();
  e->context = context;
  e->flags = flags;
  State& st = state();
  std::lock_guard lock(st.mutex);
  *out = reinterpret_cast<CUevent>(st.objects.add_event(std::move(e)));
  return CUDA_SUCCESS;
}

CUresult destroy_event(CUevent event) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  return st.objects.remove_event(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// A record replaces the event's previous state. It is reached when the stream's earlier work ends;
// recorded on a held stream, it stays incomplete until the hold ends.
CUresult record_event(CUevent event, CUstream handle, bool per_thread) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Stream* s = nullptr;
  if (CUresult status = resolve(st, handle, per_thread, &s); status != CUDA_SUCCESS) return status;
  Event* e = st.objects.find_event(event);
  // "event and stream must be on the same CUDA context" (cudaEventRecord's documentation).
  if (e == nullptr || e->context != s->context) return CUDA_ERROR_INVALID_HANDLE;
  if (implicit_in_capture(st, *s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (s->capturing) {  // a node of the graph: other streams' waits on it join the capture
    e->captured_in = s->capturing;
    return CUDA_SUCCESS;
  }
  e->captured_in.reset();
  e->recorded = true;
  ++e->unexecuted_records;
  e->held_on = s->held ? s : nullptr;
  Queued item;
  item.type = Queued::Type::EventRecord;
  item.event = event;
  enqueue(st, *s, std::move(item), lock);
  return CUDA_SUCCESS;
}

namespace {
// Whether the event's last record has been reached by the calling thread's host time.
bool complete(const Event& e) {
  return e.unexecuted_records == 0 && e.held_on == nullptr && e.time <= clock::now();
}
}  // namespace

// An event never recorded is complete (as in the real driver).
CUresult query_event(CUevent event) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  const Event* e = st.objects.find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->recorded) return CUDA_SUCCESS;
  if (!complete(*e)) return CUDA_ERROR_NOT_READY;
  clock::observed(e->time);
  return CUDA_SUCCESS;
}

// Waiting for an event recorded on a held stream ends that stream's hold.
CUresult synchronize_event(CUevent event) {
  State& st = state();
  std::unique_lock lock(st.mutex);
  Event* e = st.objects.find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->unexecuted_records > 0) {
    if (CUresult status = wait_for_queues(st, lock, [&](const Stream&) {
          const Event* again = st.objects.find_event(event);
          return again != nullptr && again->unexecuted_records > 0;
        });
        status != CUDA_SUCCESS)
      return status;
    if ((e = st.objects.find_event(event)) == nullptr) return CUDA_SUCCESS;  // destroyed meanwhile
  }
  if (e->held_on != nullptr) {
    st.objects.for_each_stream([&](Stream& s) {
      if (&s == e->held_on) st.objects.end_hold(s);
    });
  }
  clock::wait_until(e->time);
  return CUDA_SUCCESS;
}

CUresult elapsed_time(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  std::lock_guard lock(st.mutex);
  const Event* a = st.objects.find_event(start);
  const Event* b = st.objects.find_event(end);
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // Never recorded, or created without timing: CUDA_ERROR_INVALID_HANDLE, as documented.
  if (!a->recorded || !b->recorded || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!complete(*a) || !complete(*b)) return CUDA_ERROR_NOT_READY;  // as documented
  *ms = static_cast<float>((static_cast<double>(b->time) - static_cast<double>(a->time)) / 1e6);
  return CUDA_SUCCESS;
}

void hold_stream(CUstream handle, bool held) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  Stream* s = is_default(handle) ? nullptr : st.objects.find_created(handle);
  if (s == nullptr) return;
  if (held)
    s->held = true;
  else
    st.objects.end_hold(*s);
}

void set_capture_status(CUstream handle, CUstreamCaptureStatus status) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  if (Stream* s = is_default(handle) ? nullptr : st.objects.find_created(handle)) s->capture = status;
}

unsigned long long link_bytes(int device, int direction) {
  if (!valid_device(device) || (direction != UVMPOOL_SIM_HOST_TO_DEVICE && direction != UVMPOOL_SIM_DEVICE_TO_HOST))
    return 0;
  State& st = state();
  std::lock_guard lock(st.mutex);
  return st.devices[static_cast<std::size_t>(device)].link_bytes[direction];
}

unsigned long long work_count() { return state().work_count.load(std::memory_order_relaxed); }

void reset_clock() {
  State& st = state();
  std::unique_lock lock(st.mutex);
  (void)wait_for_queues(st, lock, [](const Stream&) { return true; });
  st.objects.for_each_stream([](Stream& s) { s.tail = 0; });
  st.objects.for_each_event([](Event& e) { e.time = 0; });
  for (DeviceResources& d : st.devices) d = DeviceResources{std::vector<std::uint64_t>(kCopyEngines, 0)};
  st.value_writes.clear();
  st.work_count.store(0, std::memory_order_relaxed);
  clock::reset_all();
  detector::reset();
}

// Objects' members that need more than a line.

void Objects::remove_stream(Stream* s) {
  auto it = streams_.find(s);
  if (it == streams_.end()) return;
  if (!s->queue.empty()) orphans_.push_back(std::move(it->second));
  streams_.erase(it);
}

void Objects::drop_finished_orphans() {
  std::erase_if(orphans_, [](const auto& s) { return s->queue.empty() && !s->in_host_fn; });
}

bool Objects::remove_event(const void* handle) { return events_.erase(handle) != 0; }

void Objects::erase_context(const Context* context) {
  std::erase_if(streams_, [&](const auto& e) { return e.second->context == context; });
  std::erase_if(legacy_, [&](const auto& e) { return e.first == context; });
  std::erase_if(per_thread_, [&](const auto& e) { return e.first.second == context; });
  std::erase_if(orphans_, [&](const auto& s) { return s->context == context; });
  std::erase_if(events_, [&](const auto& e) { return e.second->context == context; });
}

bool Objects::alive(const Stream* s) const {
  if (streams_.count(s) != 0) return true;
  for (const auto& [c, l] : legacy_)
    if (l.get() == s) return true;
  for (const auto& [k, p] : per_thread_)
    if (p.get() == s) return true;
  for (const auto& o : orphans_)
    if (o.get() == s) return true;
  return false;
}

void Objects::end_hold(Stream& s) {
  s.held = false;
  for (auto& [h, e] : events_)
    if (e->held_on == &s) e->held_on = nullptr;
}

}  // namespace timeline
}  // namespace uvmpool::sim
