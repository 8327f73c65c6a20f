// The producer's side: detail::record (the allocation path's cost), a thread's first event
// (allocates and registers its ring), its exit (orphans the ring), and the ring registry.
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

#include "trace/clock.h"
#include "trace/ring.h"

namespace uvmpool::trace {
namespace detail {

std::atomic<bool> g_recording{false};

namespace {

// The thread's ring. One pointer of initial-exec TLS: a load from %fs plus a constant offset, where
// the default model in a shared object calls __tls_get_addr on every access (about 1.5 ns more per
// event, uvmpool-trace-cost). The one initial-exec access marks the library STATIC_TLS: dlopened (as
// libcuda.so.1 by cudart), its whole TLS block (96 bytes today, every thread_local of the library)
// comes from the surplus static TLS glibc keeps for this (512 bytes by default). Values: nullptr
// (no ring yet), kExited (the thread is exiting), or the ring.
#if defined(UVMPOOL_TRACE_TLS_DEFAULT_MODEL)  // only the cost benchmark builds this way
__thread Ring* t_ring = nullptr;
#else
__thread Ring* t_ring __attribute__((tls_model("initial-exec"))) = nullptr;
#endif
Ring* const kExited = reinterpret_cast<Ring*>(1);

// A std::mutex, pointers and flags: trivially destructible, so nothing here is torn down at exit
// while another thread may still record.
std::mutex g_registry_mu;
Ring* g_rings = nullptr;           // every ring not yet freed, under g_registry_mu
bool g_writer_running = false;     // under g_registry_mu: a writer may hold pointers to rings
std::atomic<std::uint64_t> g_lost{0};

void unlink_locked(Ring* ring) {
  for (Ring** p = &g_rings; *p; p = &(*p)->next) {
    if (*p == ring) {
      *p = ring->next;
      return;
    }
  }
}

// Hands the thread's ring over when the thread exits: orphaned for the writer to drain and free, or
// freed at once when no writer runs (what it holds was recorded after stop()). Its own
// (default-model) TLS, touched only by a thread's first event, so the record path never pays for
// its guard variable.
struct RingOwner {
  Ring* ring = nullptr;
  ~RingOwner() {
    if (!ring) return;
    t_ring = kExited;  // an event recorded later in this thread's exit is counted as lost
    std::lock_guard<std::mutex> lock(g_registry_mu);
    if (g_writer_running) {
      ring->orphaned.store(true, std::memory_order_release);
    } else {
      unlink_locked(ring);
      delete ring;
    }
    ring = nullptr;
  }
};
thread_local RingOwner t_owner;

[[gnu::noinline, gnu::cold]] Ring* attach(Ring* current) {
  if (current == kExited) {
    g_lost.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Ring* ring = new (std::nothrow) Ring;
  if (!ring) {
    g_lost.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ring->tid = static_cast<int>(syscall(SYS_gettid));
  prctl(PR_GET_NAME, ring->name, 0, 0, 0);
  ring->name[sizeof(ring->name) - 1] = '\0';
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    ring->next = g_rings;
    g_rings = ring;
  }
  t_owner.ring = ring;
  t_ring = ring;
  return ring;
}

}  // namespace

namespace {

// Off the hot path, so that record() itself needs few registers and no stack frame to speak of.
[[gnu::noinline]] bool ring_has_room(Ring* ring, std::uint64_t head, std::uint64_t slots) {
  ring->tail_seen = ring->tail.load(std::memory_order_acquire);
  if (head + slots - ring->tail_seen <= kRingSlots) return true;
  // Only this thread writes `dropped`: a load and a store, no locked instruction.
  ring->dropped.store(ring->dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return false;
}

[[gnu::noinline]] std::uint64_t ticks_out_of_line() { return clock::ticks(); }

inline std::uint64_t stamp() {
#if defined(__x86_64__)
  if (__builtin_expect(clock::g_source.load(std::memory_order_relaxed) == clock::Source::Tsc, 1)) return __rdtsc();
#endif
  return ticks_out_of_line();
}

// A thread's first event (attaches its ring) and every event with a start (two slots, always stamped).
[[gnu::noinline]] void record_slow(Ring* ring, Kind kind, int device, std::uint64_t address, std::uint64_t bytes,
                                   std::uint64_t host_bytes, std::uint64_t start) {
  if (reinterpret_cast<std::uintptr_t>(ring) <= 1) {
    ring = attach(ring);
    if (!ring) return;
  }
  const std::uint64_t slots = has_start(kind) ? 2 : 1;
  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (head + slots - ring->tail_seen > kRingSlots && !ring_has_room(ring, head, slots)) return;
  ring->countdown = kStampEvery;
  ring->epoch_seen = ring->drain_epoch.load(std::memory_order_relaxed);
  Record& r = ring->slots[head & (kRingSlots - 1)];
  r.tick = clock::ticks();
  r.address = address;
  r.meta = pack_meta(static_cast<std::uint8_t>(kind), device, bytes);
  r.host_bytes = host_bytes;
  if (slots == 2) {
    Record& s = ring->slots[(head + 1) & (kRingSlots - 1)];
    s.tick = start;
    s.address = address;
    s.meta = pack_meta(kStartSlot, device, 0);
    s.host_bytes = 0;
  }
  ring->head.store(head + slots, std::memory_order_release);
}

// How far ahead record() asks for the ring's cache line in write mode: the writer read that line
// last, so writing it needs the line back from the writer's core; asked early, that transfer
// overlaps the program's own work instead of stalling the store (about 2 ns of 10 per event).
constexpr std::uint64_t kPrefetchAhead = 32;

}  // namespace

// The allocation path's cost (tests/trace/cost_bench.cpp measures it): one TLS load, the ring's own
// cache lines, a 32-byte record, a release store; the clock only on every kStampEvery-th event.
void record(Kind kind, int device, std::uint64_t address, std::uint64_t bytes, std::uint64_t host_bytes,
            std::uint64_t start) {
  Ring* ring = t_ring;
  if (__builtin_expect(reinterpret_cast<std::uintptr_t>(ring) <= 1 || has_start(kind), 0))
    return record_slow(ring, kind, device, address, bytes, host_bytes, start);
  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (__builtin_expect(head - ring->tail_seen >= kRingSlots, 0) && !ring_has_room(ring, head, 1)) return;
  std::uint64_t tick = 0;
  const std::uint32_t epoch = ring->drain_epoch.load(std::memory_order_relaxed);
  if (__builtin_expect(--ring->countdown == 0 || epoch != ring->epoch_seen, 0)) {
    tick = stamp();
    ring->countdown = kStampEvery;
    ring->epoch_seen = epoch;
  }
  __builtin_prefetch(&ring->slots[(head + kPrefetchAhead) & (kRingSlots - 1)], 1);
  Record& r = ring->slots[head & (kRingSlots - 1)];
  r.tick = tick;
  r.address = address;
  r.meta = pack_meta(static_cast<std::uint8_t>(kind), device, bytes);
  r.host_bytes = host_bytes;
  ring->head.store(head + 1, std::memory_order_release);
}

std::vector<Ring*> registry_snapshot() {
  std::vector<Ring*> rings;
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (Ring* r = g_rings; r; r = r->next) rings.push_back(r);
  return rings;
}

void registry_free(Ring* ring) {
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    unlink_locked(ring);
  }
  delete ring;
}

void registry_begin_session(void (*reset)(Ring&, const void*), const void* context) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (Ring* r = g_rings; r; r = r->next) reset(*r, context);
  g_writer_running = true;
}

void registry_end_session() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_writer_running = false;
  // Threads that exited after the writer's last look: nothing of theirs will be written any more.
  for (Ring** p = &g_rings; *p;) {
    Ring* r = *p;
    if (r->orphaned.load(std::memory_order_acquire)) {
      *p = r->next;
      delete r;
    } else {
      p = &r->next;
    }
  }
}

std::uint64_t lost_outside_rings() { return g_lost.load(std::memory_order_relaxed); }

void registry_abandon_after_fork() {
  new (&g_registry_mu) std::mutex;  // another thread of the parent may have held it at fork time
  g_rings = nullptr;
  g_writer_running = false;
  g_lost.store(0, std::memory_order_relaxed);
  t_ring = nullptr;
  t_owner.ring = nullptr;
}

}  // namespace detail

std::uint64_t now() { return clock::ticks(); }

}  // namespace uvmpool::trace
