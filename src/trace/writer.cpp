// The writer thread: drains every ring, gives each event its time, formats it as a Chrome trace
// event and writes the file in large pieces; samples the memory counters.
//
// Times. A producer reads the clock only on every kStampEvery-th event, on its first event after
// each drain (a drain bumps the ring's drain_epoch before reading `head`) and on every event with a
// start (a Map, a Hold: the start is a clock reading too). An event without a stamp happened between
// the stamp before it and the next stamp of its thread; the writer places it:
//   - evenly between the two, when the next stamp is in the same drain (a start closes the interval,
//     since it is read after every earlier event of the thread: callers must keep that true);
//   - one tick after the previous stamp when no later stamp exists yet (the thread paused, which is
//     why there is none): never later than the event happened.
// Either way the error is below the distance between the two stamps, which spans at most
// kStampEvery - 1 events of the thread and never more than the time between two drains (the
// previous drain forced a stamp): 2 ms while events flow, up to 50 ms after an idle spell.
// A thread's events keep their order and their times never decrease.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "config/quiet_at_fork.h"
#include "trace/session.h"

namespace uvmpool::trace::detail {
namespace {

constexpr std::uint64_t kBusyPeriodNs = 2'000'000;      // between drains while events flow
constexpr std::uint64_t kIdlePeriodNs = 50'000'000;     // the longest sleep, once nothing comes
constexpr std::uint64_t kSampleEveryNs = 10'000'000;    // memory counters
constexpr std::uint64_t kFlushEveryNs = 100'000'000;    // a killed process loses at most this much
constexpr std::size_t kFlushBytes = 1u << 20;           // write in pieces of about this size
constexpr std::size_t kMaxDevices = 64;

const char* event_name(Kind kind) {
  switch (kind) {
    case Kind::Alloc:
    case Kind::Free: return "allocation";
    case Kind::DriverAlloc:
    case Kind::DriverFree: return "driver allocation";
    case Kind::Map: return "mapping";
    case Kind::Oom: return "out of memory";
    case Kind::Unmap: return "unmap";
    case Kind::MoveBegin:
    case Kind::Moved:
    case Kind::MoveDropped: return "move";  // named by direction in format_event
    case Kind::Hold: return "hold";
    case Kind::Launch: return "launch";
    case Kind::Touch: return "touch";
    case Kind::Period: return "launch period";
  }
  return "?";
}

// "cat":"device0" (or "uvmpool" when the device is not known)
void put_category(EventText& t, int device) {
  if (device < 0) t.put("\"cat\":\"uvmpool\"");
  else t.put("\"cat\":\"device").dec(device).put("\"");
}

// {"ph":"<ph>","cat":...,"name":"<name>",<who>"ts":<ns>   (who: "pid":P,"tid":T, of the thread)
void put_head(EventText& t, std::string_view ph, int device, std::string_view name, std::string_view who,
              std::uint64_t ns) {
  t.put("{\"ph\":\"").put(ph).put("\",");
  put_category(t, device);
  t.put(",\"name\":\"").put(name).put("\",").put(who).put("\"ts\":").us(ns);
}

// ,"args":{"bytes":B,"host_bytes":H,"address":"0x..."}}
void put_sizes(EventText& t, const Event& e) {
  t.put(",\"args\":{\"bytes\":").dec(e.bytes).put(",\"host_bytes\":").dec(e.host_bytes);
  t.put(",\"address\":\"").hex(e.address).put("\"}}");
}

void format_event(Session& s, std::string_view who, const Event& e) {
  // Past the bound (or a failed write) nothing more is written: only count. An unknown kind (a
  // newer call site than this writer) has nothing to show.
  if (s.out.truncated() || s.out.failed() || e.kind > static_cast<std::uint8_t>(Kind::Last)) {
    ++s.dropped_total;
    return;
  }
  const auto kind = static_cast<Kind>(e.kind);
  int device = e.device;
  if (kind == Kind::DriverAlloc && device >= 0) s.driver_devices[e.address] = device;
  if (kind == Kind::DriverFree) {  // the free may not know the device: the allocation did
    if (auto it = s.driver_devices.find(e.address); it != s.driver_devices.end()) {
      if (device < 0) device = it->second;
      s.driver_devices.erase(it);
    }
  }
  {
    EventText t(s.out.begin());
    const char* name = event_name(kind);
    switch (kind) {
      case Kind::Alloc:
      case Kind::DriverAlloc:
        put_head(t, "b", device, name, who, e.ns);
        t.put(",\"id\":\"").hex(e.address).put("\"");
        put_sizes(t, e);
        if (kind == Kind::Alloc && e.host_bytes > 0) {  // a thread-scoped instant beside the begin
          t.put(",\n");
          put_head(t, "i", device, "spill", who, e.ns);
          t.put(",\"s\":\"t\"");
          put_sizes(t, e);
        }
        break;
      case Kind::Free:
      case Kind::DriverFree:
        put_head(t, "e", device, name, who, e.ns);
        t.put(",\"id\":\"").hex(e.address).put("\",\"args\":{\"bytes\":").dec(e.bytes).put("}}");
        break;
      case Kind::Map:
      case Kind::Hold:  // slices from their start
        put_head(t, "X", device, name, who, e.start_ns);
        t.put(",\"dur\":").us(e.ns - e.start_ns);
        put_sizes(t, e);
        break;
      case Kind::Unmap:  // thread-scoped instants
      case Kind::Touch:
        put_head(t, "i", device, name, who, e.ns);
        t.put(",\"s\":\"t\"");
        put_sizes(t, e);
        break;
      case Kind::Oom:
        put_head(t, "i", device, name, who, e.ns);
        t.put(",\"s\":\"p\",\"args\":{\"bytes\":").dec(e.bytes).put("}}");
        break;
      case Kind::MoveBegin:
      case Kind::Moved:
      case Kind::MoveDropped:  // async: moves of one epoch overlap, so they cannot nest on the mover's track
        put_head(t, kind == Kind::MoveBegin ? "b" : "e", device, e.host_bytes != 0 ? "demote" : "promote", who, e.ns);
        t.put(",\"id\":\"").hex(e.address).put("\"");
        if (kind == Kind::MoveBegin) put_sizes(t, e);
        else t.put(",\"args\":{\"moved\":").put(kind == Kind::Moved ? "true" : "false").put("}}");
        break;
      case Kind::Launch:
        put_head(t, "i", device, name, who, e.ns);
        t.put(",\"s\":\"t\",\"args\":{\"bytes\":").dec(e.bytes).put(",\"host_bytes\":").dec(e.host_bytes);
        t.put(",\"function\":\"").hex(e.address).put("\"}}");
        break;
      case Kind::Period:
        put_head(t, "i", device, name, who, e.ns);
        t.put(",\"s\":\"p\",\"args\":{\"launches\":").dec(e.bytes).put("}}");
        break;
    }
  }
  if (!s.out.end(true)) ++s.dropped_total;
}

// Spreads `count` events from index `first` after `from`, `step` ticks apart.
void spread(std::vector<Event>& ev, std::size_t first, std::size_t count, std::uint64_t from, std::uint64_t step) {
  for (std::size_t i = 0; i < count; ++i) ev[first + i].tick = from + step * (i + 1);
}

// Gives every event in s.batch its time (see the top of this file), in ring order, never decreasing.
void assign_times(Session& s, Ring& r) {
  std::vector<Event>& ev = s.events_batch;
  const std::vector<Record>& batch = s.batch;
  ev.clear();
  std::uint64_t prev = r.last_tick;
  std::size_t run_first = 0, run = 0;  // unstamped events since `prev`
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Record& rec = batch[i];
    const std::uint8_t kind = meta_kind(rec.meta);
    if (kind == kStartSlot) continue;  // read with its Map, just before
    Event e;
    e.kind = kind;
    e.device = meta_device(rec.meta);
    e.address = rec.address;
    e.bytes = meta_bytes(rec.meta);
    e.host_bytes = rec.host_bytes;
    if (kind <= static_cast<std::uint8_t>(Kind::Last) && has_start(static_cast<Kind>(kind)) && i + 1 < batch.size() &&
        meta_kind(batch[i + 1].meta) == kStartSlot)
      e.start_tick = batch[i + 1].tick;
    if (rec.tick != 0) {
      const std::uint64_t t = std::max(rec.tick, prev);  // a thread moved to a core a few ticks behind
      if (run > 0) {
        // A start (a Map's, a Hold's) was read after every earlier event of its thread: it closes their interval.
        const std::uint64_t close = e.start_tick != 0 ? std::clamp(e.start_tick, prev, t) : t;
        spread(ev, run_first, run, prev, (close - prev) / (run + 1));
        run = 0;
      }
      e.tick = prev = t;
    } else if (run++ == 0) {
      run_first = ev.size();
    }
    ev.push_back(e);
  }
  if (run > 0) {  // no later stamp yet: one tick apart after the last one, so never after they happened
    spread(ev, run_first, run, prev, 1);
    prev += run;
  }
  r.last_tick = prev;
  for (Event& e : ev) {
    const std::uint64_t before = r.last_ns;
    e.ns = std::max(s.cal.to_ns(e.tick), before);
    e.start_ns = e.ns;
    if (e.start_tick != 0)  // shown at its start
      e.start_ns = std::clamp(s.cal.to_ns(e.start_tick), before, e.ns);
    r.last_ns = e.ns;
  }
}

void publish(Session& s) {
  s.events.store(s.out.events_written(), std::memory_order_relaxed);
  s.dropped.store(s.dropped_total + s.out.lost_events(), std::memory_order_relaxed);
  s.bytes.store(s.out.bytes_written(), std::memory_order_relaxed);
}

void flush(Session& s) {
  s.last_flush_ns = clock::monotonic_ns();
  if (!s.out.flush()) g_recording.store(false, std::memory_order_relaxed);  // logged by JsonFile
}

std::size_t drain_ring(Session& s, Ring& r) {
  // Bump the epoch before reading head, so that any event this drain does not see is stamped.
  r.drain_epoch.store(r.drain_epoch.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  const std::uint64_t head = r.head.load(std::memory_order_seq_cst);
  const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
  const std::uint64_t dropped = r.dropped.load(std::memory_order_relaxed);
  s.dropped_total += dropped - r.dropped_seen;
  r.dropped_seen = dropped;
  if (head == tail) return 0;
  // Copy out and release the slots at once: formatting is slower than the producer.
  s.batch.resize(head - tail);
  const std::uint64_t first = tail & (kRingSlots - 1);
  const std::uint64_t part = std::min<std::uint64_t>(head - tail, kRingSlots - first);
  std::memcpy(s.batch.data(), &r.slots[first], part * sizeof(Record));
  std::memcpy(s.batch.data() + part, &r.slots[0], (head - tail - part) * sizeof(Record));
  r.tail.store(head, std::memory_order_release);

  if (r.named_in != s.id) {
    write_thread_name(s, r.tid, r.name);
    r.named_in = s.id;
  }
  assign_times(s, r);
  fmt::memory_buffer who;  // "pid":P,"tid":T, once for the whole batch
  fmt::format_to(fmt::appender(who), "\"pid\":{},\"tid\":{},", s.pid, r.tid);
  const std::string_view who_text(who.data(), who.size());
  for (const Event& e : s.events_batch) {
    format_event(s, who_text, e);
    if (s.out.buffered() >= kFlushBytes) flush(s);
  }
  return s.batch.size();
}

std::size_t drain_all(Session& s) {
  s.cal.refine();
  std::size_t total = 0;
  for (Ring* r : registry_snapshot()) {
    // Read before the drain: once set, the thread has published its last event.
    const bool orphaned = r->orphaned.load(std::memory_order_acquire);
    total += drain_ring(s, *r);
    if (orphaned) registry_free(r);
  }
  const std::uint64_t lost = lost_outside_rings();
  s.dropped_total += lost - s.lost_seen;
  s.lost_seen = lost;
  return total;
}

// Counter events, only for values that changed since the last sample.
void sample(Session& s, std::uint64_t now) {
  s.last_sample_ns = now;
  if (!s.sampler || s.out.truncated() || s.out.failed()) return;
  Sample buf[kMaxDevices];
  const std::size_t n = std::min(s.sampler(buf, kMaxDevices), kMaxDevices);
  for (std::size_t i = 0; i < n; ++i) {
    const Sample& v = buf[i];
    auto [it, fresh] = s.samples.try_emplace(v.device, v);
    const Sample& w = it->second;
    if (!fresh && w.live_device == v.live_device && w.live_host == v.live_host && w.held_device == v.held_device &&
        w.held_host == v.held_host)
      continue;
    it->second = v;
    fmt::memory_buffer& b = s.out.begin();
    fmt::format_to(fmt::appender(b), "{{\"ph\":\"C\",\"cat\":\"device{}\",\"name\":\"device {} memory (bytes)\",\"pid\":{},\"tid\":{},\"ts\":",
                   v.device, v.device, s.pid, s.writer_tid);
    EventText(b).us(now);
    fmt::format_to(fmt::appender(b),
                   ",\"args\":{{\"live_device\":{},\"live_host\":{},\"held_device\":{},\"held_host\":{}}}}}",
                   v.live_device, v.live_host, v.held_device, v.held_host);
    s.out.end(false);
  }
}

std::string closing_event(const char* name, int pid, int tid, std::uint64_t ns, std::uint64_t events,
                          std::uint64_t dropped, std::uint64_t max_bytes) {
  fmt::memory_buffer b;
  fmt::format_to(fmt::appender(b), "{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"uvmpool\",\"name\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":",
                 name, pid, tid);
  EventText(b).us(ns);
  fmt::format_to(fmt::appender(b), ",\"args\":{{\"events\":{},\"dropped\":{},\"max_bytes\":{}}}}}", events, dropped,
                 max_bytes);
  return fmt::to_string(b);
}

constexpr const char* kTruncated = "uvmpool trace truncated";
constexpr const char* kDropped = "uvmpool trace dropped events";  // rings overflowed, file not full

// Last round: everything recorded before stop(), the last sample, and the closing event when
// anything was lost.
void finish(Session& s) {
  drain_all(s);
  sample(s, clock::monotonic_ns());
  flush(s);
  const std::uint64_t dropped = s.dropped_total + s.out.lost_events();
  std::string last;
  if (s.out.truncated() || dropped > 0)
    last = closing_event(s.out.truncated() ? kTruncated : kDropped, s.pid, s.writer_tid, clock::monotonic_ns(),
                         s.out.events_written(), dropped, s.out.max_bytes());
  s.out.finish(last);
  publish(s);
}

}  // namespace

std::size_t closing_event_reserve() {
  return std::max(closing_event(kTruncated, INT_MIN, INT_MIN, ~0ull, ~0ull, ~0ull, ~0ull).size(),
                  closing_event(kDropped, INT_MIN, INT_MIN, ~0ull, ~0ull, ~0ull, ~0ull).size());
}

void write_process_name(Session& s, std::string_view name) {
  fmt::memory_buffer& b = s.out.begin();
  fmt::format_to(fmt::appender(b), "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":{},\"ts\":0,\"args\":{{\"name\":\"",
                 s.pid, s.pid);
  append_json_string(b, name);
  b.append(std::string_view("\"}}"));
  s.out.end(false);
}

void write_thread_name(Session& s, int tid, std::string_view name) {
  fmt::memory_buffer& b = s.out.begin();
  fmt::format_to(fmt::appender(b), "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"ts\":0,\"args\":{{\"name\":\"",
                 s.pid, tid);
  append_json_string(b, name);
  b.append(std::string_view("\"}}"));
  s.out.end(false);
}

void writer_main(Session* sp) {
  Session& s = *sp;
  pthread_setname_np(pthread_self(), "uvmpool-trace");
  s.writer_tid = static_cast<int>(syscall(SYS_gettid));
  write_thread_name(s, s.writer_tid, "uvmpool-trace");
  s.last_flush_ns = clock::monotonic_ns();
  std::uint64_t period = kBusyPeriodNs;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait_for(lock, std::chrono::nanoseconds(period), [&] { return s.stop_requested; });
      if (s.stop_requested) break;
    }
    const config::QuietAtFork quiet;  // a fork waits for this round (config/quiet_at_fork.h)
    const std::size_t drained = drain_all(s);
    const std::uint64_t now = clock::monotonic_ns();
    if (now - s.last_sample_ns >= kSampleEveryNs) sample(s, now);
    if (s.out.buffered() >= kFlushBytes || (s.out.buffered() > 0 && now - s.last_flush_ns >= kFlushEveryNs)) flush(s);
    publish(s);
    period = drained > 0 ? kBusyPeriodNs : std::min(period * 2, kIdlePeriodNs);
  }
  finish(s);
}

}  // namespace uvmpool::trace::detail
