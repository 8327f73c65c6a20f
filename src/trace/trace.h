// UVMPOOL_TRACE=file: a Chrome trace-event JSON file (opens in ui.perfetto.dev) of what the pool did.
// Producers (the pool, on the allocation path) append fixed-size records to a per-thread ring with no
// lock, no allocation and no system call; one writer thread drains the rings, turns records into
// JSON and samples memory counters. The file is bounded (UVMPOOL_TRACE_MAX): past it, events are
// counted as dropped and the file is closed properly.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace uvmpool::trace {

enum class Kind : std::uint8_t {
  Alloc,        // pool allocation: address, bytes asked for, host_bytes of them in host memory (spilled)
  Free,         // pool free: address, bytes
  Map,          // chunks mapped into a range (a stitched mapping, a slab's chunk, a premapped host run):
                // address, bytes mapped, host_bytes of them host chunks (the range's tail); start = when building began
  Oom,          // an allocation refused (device and host exhausted): bytes
  DriverAlloc,  // an allocation handed to the driver (explicit memory pool, graph capture, no VMM): address, bytes
  DriverFree,   // its free: address
  Unmap,        // chunks unmapped from a range (a mapping taken apart or shrunk, a slab or a host run given
                // back): address, bytes, host_bytes of them host chunks
  // Tiering (src/tiering). A move is an async slice from MoveBegin to Moved or MoveDropped, named
  // "promote" or "demote": address, bytes, host_bytes = bytes when it goes to host memory (a
  // demotion), 0 when it comes to the device.
  MoveBegin,    // prepared (staging mapped, copy about to be queued)
  Moved,        // committed: the range now lies in its new tier
  MoveDropped,  // not committed (touched during an overlapped copy, a failing step, the hold given up)
  Hold,         // an epoch's hold on the program's streams, from the hold (start) to its release: bytes
                // moved in it, host_bytes of them demoted
  Launch,       // a launch that touched pool memory: address = the function, bytes touched, host_bytes of
                // them in host memory (read in place over PCIe); its Touch events follow on its thread
  Touch,        // one pointer the launch passed: address = the pointer, bytes = its allocation's size,
                // host_bytes = that size when it lay in host memory at the launch
  Period,       // the tiering policy learned a launch period (bytes = its launches) or forgot it (0)
  Last = Period,
};
// Kinds that carry a start time (a second slot, always stamped): shown as slices from start to now.
// The start must be read after every earlier event of the recording thread (the writer relies on it).
inline constexpr bool has_start(Kind k) { return k == Kind::Map || k == Kind::Hold; }

// Memory figures of one device, sampled by the writer thread for the counter tracks.
struct Sample {
  int device = 0;
  std::uint64_t live_device = 0;  // bytes of live allocations in device memory
  std::uint64_t live_host = 0;    // ... in pinned host memory (spilled)
  std::uint64_t held_device = 0;  // device memory the pool holds (chunks)
  std::uint64_t held_host = 0;    // pinned host memory the pool holds
};
// Fills up to `max` samples, returns how many. Called on the writer thread; must not call the driver.
using Sampler = std::size_t (*)(Sample* out, std::size_t max);

namespace detail {
extern std::atomic<bool> g_recording;
void record(Kind kind, int device, std::uint64_t address, std::uint64_t bytes, std::uint64_t host_bytes,
            std::uint64_t start);
}  // namespace detail

// Whether a trace is being recorded: one relaxed load; call sites test it before gathering arguments.
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// A timestamp in the recorder's clock (cheap), for the `start` of Map and Hold events.
std::uint64_t now();

// Appends one event (no-op unless recording). Never blocks: a full ring drops the event and counts it.
inline void record(Kind kind, int device, std::uint64_t address, std::uint64_t bytes,
                   std::uint64_t host_bytes = 0, std::uint64_t start = 0) {
  if (recording()) detail::record(kind, device, address, bytes, host_bytes, start);
}

// Starts recording into `path` ("%p" is replaced by the process id) until `max_bytes` of JSON are
// written. Starts the writer thread. Returns false (and logs why) when the file cannot be opened.
bool start(const std::string& path, std::uint64_t max_bytes, Sampler sampler);
// Drains what is left, closes the JSON and the file, joins the writer. Safe to call twice, or never
// after start. Called at exit; later records are dropped.
void stop();
// In a child after fork: forget the parent's trace without touching its file or thread.
void abandon_after_fork();

// Figures about the recording (tests, the exit report).
struct Status {
  bool active = false;
  std::string path;             // the file, %p replaced
  std::uint64_t events = 0;     // events written to the file
  std::uint64_t dropped = 0;    // lost: a ring was full, or the file reached its bound
  std::uint64_t bytes = 0;      // JSON bytes written
};
Status status();

}  // namespace uvmpool::trace
