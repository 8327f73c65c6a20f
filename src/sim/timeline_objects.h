// The objects of timeline.cpp (private to it): streams, events, and the work queued on streams.
// Every field is guarded by timeline.cpp's State::mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sim/contexts.h"
#include "sim/timeline.h"

namespace uvmpool::sim::timeline {

// CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT of the simulated devices (devices.cpp answers the same).
inline constexpr std::size_t kCopyEngines = 3;

enum class StreamKind { Created, Legacy, PerThread };

// An entry of a stream's queue: work, or an event record or wait, which go in stream order too.
struct Queued {
  enum class Type { Work, EventRecord, EventWait } type = Type::Work;
  WorkSpec spec;               // Type::Work
  const void* event = nullptr;  // EventRecord, EventWait
  std::uint64_t submitted_at = 0;
  bool waited = false;  // a value wait found its value missing at least once
};

// A stream capture (graphs.cpp makes a graph of it): the work given to its streams, in the order it was
// given (a graph launch replays it on one stream, in that order: a valid order of the captured graph).
// The stream that began it ends it; streams that waited for an event recorded in it joined it.
struct CaptureSeq {
  std::uint64_t id = 0;
  // The mode it began in and the thread that began it: what they forbid other calls (unsafe_call).
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread{};
  std::vector<WorkSpec> work;
  bool invalidated = false;  // an operation not allowed in a capture was tried: ending it fails
  bool ended = false;
};

struct Stream {
  Context* context = nullptr;
  StreamKind kind = StreamKind::Created;
  unsigned flags = 0;
  int priority = 0;
  bool held = false;  // uvmpool_sim_hold_stream
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;  // uvmpool_sim_set_capture_status
  std::shared_ptr<CaptureSeq> capturing;  // a real capture this stream began or joined
  bool capture_origin = false;            // ... began (only it may end it)
  std::uint64_t tail = 0;    // when the last executed work on it ends
  std::deque<Queued> queue;  // submitted, not executed yet
  bool in_host_fn = false;   // a host function of it is running (the lock is dropped meanwhile)

  // Blocking streams wait for the legacy default stream and it for them.
  bool blocking() const { return kind != StreamKind::Legacy && (flags & CU_STREAM_NON_BLOCKING) == 0; }
};

struct Event {
  Context* context = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  unsigned unexecuted_records = 0;  // records queued behind a wait
  std::uint64_t time = 0;           // when the last executed record was reached
  const Stream* held_on = nullptr;  // recorded on a held stream: incomplete until the hold ends
  std::shared_ptr<CaptureSeq> captured_in;  // last recorded in a capture: a wait on it joins the capture
};

// Every stream and event. Destroyed streams with queued work live on (unnamed) until it has run.
class Objects {
 public:
  Stream* find_created(const void* handle) {
    auto it = streams_.find(handle);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  Stream* legacy_stream(Context* context) { return default_stream(legacy_[context], context, StreamKind::Legacy); }
  Stream* per_thread_stream(Context* context) {
    return default_stream(per_thread_[{std::this_thread::get_id(), context}], context, StreamKind::PerThread);
  }
  const Stream* find_legacy(const Context* context) const {
    auto it = legacy_.find(context);
    return it == legacy_.end() ? nullptr : it->second.get();
  }
  Event* find_event(const void* handle) {
    auto it = events_.find(handle);
    return it == events_.end() ? nullptr : it->second.get();
  }

  Stream* add_stream(std::unique_ptr<Stream> s) {
    Stream* raw = s.get();
    streams_.emplace(raw, std::move(s));
    return raw;
  }
  Event* add_event(std::unique_ptr<Event> e) {
    Event* raw = e.get();
    events_.emplace(raw, std::move(e));
    return raw;
  }
  // The stream stops being nameable; with queued work it lives on until that has run.
  void remove_stream(Stream* s);
  void drop_finished_orphans();
  bool remove_event(const void* handle);
  void erase_context(const Context* context);
  bool alive(const Stream* s) const;

  // Ends a hold: every event recorded on the held stream completes.
  void end_hold(Stream& s);

  template <typename F>
  void for_each_stream(F&& f) {
    for (auto& [h, s] : streams_) f(*s);
    for (auto& [c, s] : legacy_) f(*s);
    for (auto& [k, s] : per_thread_) f(*s);
    for (auto& s : orphans_) f(*s);
  }
  template <typename F>
  void for_each_event(F&& f) {
    for (auto& [h, e] : events_) f(*e);
  }

 private:
  Stream* default_stream(std::unique_ptr<Stream>& slot, Context* context, StreamKind kind) {
    if (!slot) {
      slot = std::make_unique<Stream>();
      slot->context = context;
      slot->kind = kind;
    }
    return slot.get();
  }

  std::unordered_map<const void*, std::unique_ptr<Stream>> streams_;
  std::map<const Context*, std::unique_ptr<Stream>> legacy_;
  std::map<std::pair<std::thread::id, const Context*>, std::unique_ptr<Stream>> per_thread_;
  std::vector<std::unique_ptr<Stream>> orphans_;
  std::unordered_map<const void*, std::unique_ptr<Event>> events_;
};

}  // namespace uvmpool::sim::timeline
