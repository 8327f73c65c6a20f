// Per-thread rings: each recording thread owns one single-producer/single-consumer ring of fixed-size
// records; the writer thread is its only consumer. The producer's path takes no lock, allocates
// nothing, makes no system call and does no locked read-modify-write: it writes a record and
// publishes it with a release store of `head` (a plain store on x86-64).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "trace/trace.h"

namespace uvmpool::trace::detail {

// Timestamps: a thread reads the clock on every kStampEvery-th event, on the first event after the
// writer drained its ring, and on every event with a start; the writer interpolates the others (see writer.cpp).
#ifndef UVMPOOL_TRACE_STAMP_EVERY
#define UVMPOOL_TRACE_STAMP_EVERY 8
#endif
inline constexpr std::uint32_t kStampEvery = UVMPOOL_TRACE_STAMP_EVERY;

// One event, 32 bytes. `tick` is 0 when the event was not stamped. An event with a start (has_start:
// a Map, a Hold) takes two slots: the second (kind kStartSlot) carries the start's tick in its `tick`.
struct Record {
  std::uint64_t tick;
  std::uint64_t address;
  std::uint64_t meta;  // kind (bits 0-7), device (8-15, two's complement), bytes (16-63, saturated)
  std::uint64_t host_bytes;
};
static_assert(sizeof(Record) == 32);
inline constexpr std::uint8_t kStartSlot = 0xfe;
inline constexpr std::uint64_t kMaxBytesField = (1ull << 48) - 1;

inline std::uint64_t pack_meta(std::uint8_t kind, int device, std::uint64_t bytes) {
  if (bytes > kMaxBytesField) bytes = kMaxBytesField;
  return kind | (static_cast<std::uint64_t>(static_cast<std::uint8_t>(device)) << 8) | (bytes << 16);
}
inline std::uint8_t meta_kind(std::uint64_t m) { return static_cast<std::uint8_t>(m); }
inline int meta_device(std::uint64_t m) { return static_cast<std::int8_t>(m >> 8); }
inline std::uint64_t meta_bytes(std::uint64_t m) { return m >> 16; }

// 64K records: 2 MiB of virtual memory per recording thread, touched only as far as it is used.
inline constexpr std::uint64_t kRingSlots = 1u << 16;

struct alignas(64) Ring {
  // Written by the producer only.
  std::atomic<std::uint64_t> head{0};
  std::uint64_t tail_seen = 0;           // the producer's last look at `tail`: re-read only when full
  std::uint32_t countdown = 1;           // events until the next stamp
  std::uint32_t epoch_seen = 0;          // the drain_epoch of the last stamp
  std::atomic<std::uint64_t> dropped{0};  // events lost because the ring was full (load + store)

  // Written by the writer only.
  alignas(64) std::atomic<std::uint64_t> tail{0};
  std::atomic<std::uint32_t> drain_epoch{1};  // bumped at each drain: the next event is stamped

  // Set by the owning thread's exit while a writer runs; the writer frees the ring once drained.
  alignas(64) std::atomic<bool> orphaned{false};
  int tid = 0;
  char name[16] = {};  // the thread's name when it first recorded
  Ring* next = nullptr;  // the registry's list, under its mutex

  // The writer's own bookkeeping about this ring (see writer.cpp).
  std::uint64_t last_tick = 0;     // tick given to the last event (the next interval starts there)
  std::uint64_t last_ns = 0;       // last timestamp written for this thread (kept non-decreasing)
  std::uint64_t dropped_seen = 0;  // `dropped` already counted
  std::uint32_t named_in = 0;      // the session that wrote this thread's name

  Record slots[kRingSlots];  // left uninitialised: pages are touched as the ring fills
};

// The registry of every ring not yet freed. Rings outlive sessions: a live thread keeps its ring
// across stop() and start(). Only the writer (between registry_begin_session and
// registry_end_session) and those two calls touch a ring other than its owner.
std::vector<Ring*> registry_snapshot();
// Unlinks and frees a ring the writer has drained after it was orphaned.
void registry_free(Ring* ring);
// Around a session's writer: begin resets every ring's leftovers (reset(ring, context)) and marks a
// writer as running, so exiting threads orphan their rings instead of freeing them; end (after the
// writer is joined) clears the mark and frees the rings orphaned since the last drain.
void registry_begin_session(void (*reset)(Ring&, const void*), const void* context);
void registry_end_session();
// Events lost outside any ring (a thread recording while it exits, or no memory for its ring).
std::uint64_t lost_outside_rings();
// In a fork child: forget every ring (the memory is the parent's copy, left alone) and this
// thread's own, without taking any lock another thread might have held at fork time.
void registry_abandon_after_fork();

}  // namespace uvmpool::trace::detail
