// One recording, from start() to stop(): the file, the writer thread and the writer's bookkeeping.
// trace.cpp starts and stops sessions; writer.cpp is the writer thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trace/clock.h"
#include "trace/json_file.h"
#include "trace/ring.h"
#include "trace/trace.h"

namespace uvmpool::trace::detail {

// A record with its time, as the writer formats it.
struct Event {
  std::uint64_t tick = 0;        // stamped or interpolated
  std::uint64_t start_tick = 0;  // has_start kinds: when it began (a Map's building, a Hold)
  std::uint64_t ns = 0, start_ns = 0;
  std::uint64_t address = 0, bytes = 0, host_bytes = 0;
  std::uint8_t kind = 0;
  int device = 0;
};

struct Session {
  // Set by start() before the writer runs.
  std::uint32_t id = 0;
  int pid = 0;
  Sampler sampler = nullptr;
  JsonFile out;
  clock::Calibration cal;
  std::uint64_t start_tick = 0;

  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;  // under mu

  // What status() reports while recording (the writer publishes after each round).
  std::atomic<std::uint64_t> events{0}, dropped{0}, bytes{0};

  // The writer thread's own.
  int writer_tid = 0;
  std::uint64_t dropped_total = 0;  // rings full, threads lost, bound reached (write losses: out)
  std::uint64_t lost_seen = 0;      // lost_outside_rings() already counted
  std::uint64_t last_sample_ns = 0, last_flush_ns = 0;
  std::map<int, Sample> samples;                     // last values written, per device
  std::unordered_map<std::uint64_t, int> driver_devices;  // live driver allocations: address -> device
  std::vector<Record> batch;
  std::vector<Event> events_batch;
};

// The writer thread's body: drains, samples and writes until stop is requested, then closes the file.
void writer_main(Session* s);
// Room the closing event needs (JsonFile::open's reserve).
std::size_t closing_event_reserve();
// "M" events written by start() before the writer runs.
void write_process_name(Session& s, std::string_view name);
void write_thread_name(Session& s, int tid, std::string_view name);

}  // namespace uvmpool::trace::detail
