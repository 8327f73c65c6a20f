// start(), stop(), status() and the fork child's abandon_after_fork(): the life of a session.
#include "trace/trace.h"

#include "config/process_info.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "config/log.h"
#include "trace/session.h"

namespace uvmpool::trace {
namespace {

using detail::Session;

// Trivially destructible globals: nothing is torn down at exit under a thread still using it.
std::mutex g_control;              // start, stop, status
Session* g_session = nullptr;      // the running session
Status* g_last = nullptr;          // the figures of the last session, once stopped
std::uint32_t g_sessions = 0;      // ids, so the writer knows which rings it has named

// Forgets a ring's leftovers from an earlier session (events recorded while none ran).
void reset_ring(detail::Ring& r, const void* session) {
  const auto& s = *static_cast<const Session*>(session);
  r.tail.store(r.head.load(std::memory_order_acquire), std::memory_order_release);
  r.dropped_seen = r.dropped.load(std::memory_order_relaxed);
  r.last_tick = s.start_tick;
  r.last_ns = 0;
  r.drain_epoch.store(r.drain_epoch.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

}  // namespace

bool start(const std::string& path, std::uint64_t max_bytes, Sampler sampler) {
  std::lock_guard<std::mutex> lock(g_control);
  const std::string file = config::expand_pid(path);
  if (g_session) {
    log::warn("trace: already recording to {}; not starting another trace into {}", g_session->out.path(), file);
    return false;
  }
  auto s = std::make_unique<Session>();
  std::string error;
  if (file.empty()) error = "no file named";
  if (!error.empty() || !s->out.open(file, max_bytes, detail::closing_event_reserve(), error)) {
    log::warn("trace: cannot write {}: {}; no trace recorded", file, error);
    return false;
  }
  const clock::Source source = clock::choose_source();
  s->id = ++g_sessions;
  s->pid = getpid();
  s->sampler = sampler;
  s->cal.begin();
  s->start_tick = clock::ticks();
  s->lost_seen = detail::lost_outside_rings();
  detail::write_process_name(*s, config::command_line());
  detail::registry_begin_session(reset_ring, s.get());

  // The writer takes no signals: the program's handlers run on its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    s->thread = std::thread(detail::writer_main, s.get());
  } catch (const std::exception& e) {
    error = e.what();
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!s->thread.joinable()) {
    detail::registry_end_session();
    log::warn("trace: cannot start the writer thread ({}); no trace recorded", error);
    s->out.finish("");
    return false;
  }
  g_session = s.release();
  detail::g_recording.store(true, std::memory_order_release);
  log::info("trace: recording to {} (clock {}, at most {} bytes)", file, clock::source_name(source), max_bytes);
  return true;
}

void stop() {
  std::lock_guard<std::mutex> lock(g_control);
  Session* s = g_session;
  if (!s) return;
  detail::g_recording.store(false, std::memory_order_relaxed);
  if (s->thread.get_id() == std::this_thread::get_id()) return;  // from the writer (a sampler): cannot join
  {
    std::lock_guard<std::mutex> wake(s->mu);
    s->stop_requested = true;
  }
  s->cv.notify_all();
  s->thread.join();
  detail::registry_end_session();
  if (!g_last) g_last = new Status;
  *g_last = Status{false, s->out.path(), s->events.load(), s->dropped.load(), s->bytes.load()};
  log::info("trace: {} events written to {} ({} bytes), {} dropped", g_last->events, g_last->path, g_last->bytes,
            g_last->dropped);
  g_session = nullptr;
  delete s;
}

void abandon_after_fork() {
  // The only thread of the child: the parent's writer does not exist here, and its locks may have
  // been held at fork time. Everything is forgotten (the memory is the parent's copy, leaked).
  detail::g_recording.store(false, std::memory_order_relaxed);
  if (g_session) g_session->out.abandon();
  g_session = nullptr;
  g_last = nullptr;
  new (&g_control) std::mutex;
  detail::registry_abandon_after_fork();
}

Status status() {
  std::lock_guard<std::mutex> lock(g_control);
  if (const Session* s = g_session)
    return {detail::g_recording.load(std::memory_order_relaxed), s->out.path(), s->events.load(), s->dropped.load(),
            s->bytes.load()};
  return g_last ? *g_last : Status{};
}

}  // namespace uvmpool::trace
