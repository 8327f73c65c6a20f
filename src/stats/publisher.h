// Live statistics: a process's Report, refreshed every UVMPOOL_STATS_INTERVAL in its shared-memory
// segment (shm_layout.h) for uvmpool-stat. One thread per process wakes to copy the figures; the
// allocation path never touches the segment.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "stats/report.h"
#include "stats/shm_layout.h"

namespace uvmpool::stats {

// One segment, written only by its owner.
class Segment {
 public:
  // Creates <dir>/uvmpool-<uid>-<pid> (mode 0600) laid out for `first`'s metrics and fills it with
  // `first`'s values; `dir` "" is the user's own directory (shm::user_directory, made 0700 if
  // missing, refused unless it is a directory of ours that only we can enter). A segment left by an
  // earlier process with the same pid is replaced; one a live writer holds (a process of the same pid
  // in another pid namespace sharing /dev/shm) is left alone, and the next instance's name taken
  // (shm_layout.h). nullptr and *error on failure (no /dev/shm, out of space, the directory taken by
  // another user, every instance's name held).
  static std::unique_ptr<Segment> create(const Report& first, std::uint32_t interval_ms, std::string* error,
                                         const std::string& dir = "");
  ~Segment();  // unmaps and unlocks; the file stays until unlink()
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Writes r's values (same metrics as the first Report) under the seqlock.
  void write(const Report& r);
  void set_state(shm::State state);
  void unlink();  // removes the file (the mapping stays valid)
  // In a forked child: unmaps and closes the parent's segment, touching neither its file nor its lock
  // (a flock belongs to the open file, which the parent keeps open), so that a child outliving its
  // parent does not keep the parent's segment looking alive. System calls only, no allocation.
  void close_inherited();
  const std::string& path() const { return path_; }

 private:
  Segment() = default;
  std::string path_;
  void* base_ = nullptr;
  int fd_ = -1;  // kept open for its lock
  std::size_t bytes_ = 0;
  std::size_t process_count_ = 0;
  std::size_t device_count_ = 0;  // metrics per device
};

// The thread that keeps a segment current. On starting it also removes the stale segments of this
// user's ended processes in its directory (shm_reader.h: nobody holds their lock): a process killed
// by a signal or abort() cannot remove its own, and no uvmpool-stat may ever run to sweep them.
class Publisher {
 public:
  // Creates the segment from collect() and starts refreshing it. nullptr (and a log line) on failure.
  static std::unique_ptr<Publisher> start(std::function<Report()> collect, std::uint32_t interval_ms,
                                          const std::string& dir = "");
  ~Publisher();  // stop(false) unless already stopped
  // Joins the thread; writes the final figures; marks the segment exited, then removes it unless `keep`.
  void stop(bool keep = false);
  // In a forked child: forgets the parent's thread and closes its copy of the segment (the file and
  // the lock stay the parent's); the caller must then leak the Publisher.
  void abandon();
  const std::string& path() const { return segment_->path(); }

 private:
  Publisher() = default;
  void run(std::latch* quiet_taken);  // counts it down once it holds the fork lock
  std::function<Report()> collect_;
  std::unique_ptr<Segment> segment_;
  std::uint32_t interval_ms_ = 250;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

// The process's publisher and trace, started once the program first reaches the pool (hooks call
// it): live statistics unless UVMPOOL_STATS_SHM=0, the trace when UVMPOOL_TRACE is set. Stops both
// at exit (before the exit report) and forgets them in a forked child. Starting and stopping exclude
// each other: an exit racing the first allocation on another thread either finds them started and
// stops them (complete trace, segment removed) or keeps them from starting at all.
void start_process_observers();
// Registers the exit and fork handlers; called by the library constructor, before the program can
// start a thread (start_process_observers calls it too, for programs that link uvmpool's parts).
void prepare_process_observers();
// The segment path of the process's publisher, "" when none (tests).
std::string process_segment_path();

// The user's directory for segments (and CUDA IPC sockets, src/hooks/ipc_socket.cpp): made 0700 if
// missing; false (and why in *error) unless it is a real directory of ours that nobody else can enter.
bool prepare_user_directory(const std::string& dir, std::string* error);

}  // namespace uvmpool::stats
