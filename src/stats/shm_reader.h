// Reading the segments that processes publish their live statistics in (shm_layout.h): finding them,
// telling live ones from stale ones, and copying one into a Report. Everything read is checked
// against the file's size first, so a truncated, half-written or hostile file gives an error, never a
// crash or a read past the end. Used by uvmpool-stat; touches no driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stats/report.h"
#include "stats/shm_layout.h"

namespace uvmpool::stats {

struct SegmentInfo {
  std::string path;            // directory + "/" + name
  std::string name;            // "uvmpool-<uid>-<pid>"
  unsigned uid = 0;            // from the name
  std::int64_t pid = 0;        // from the name
  unsigned owner_uid = 0;      // the file's owner
  bool readable = false;       // opened, and its header is complete and valid
  std::string error;           // why not readable: "permission denied: ...", "not ready: ...", ...
  std::uint64_t start_ticks = 0;             // the header's (when readable)
  shm::State state = shm::State::Starting;   // the header's (when readable)
  bool alive = false;          // the process that wrote it still runs (process_alive), or holds a lock on it
  bool fresh = false;          // its values were written within 3 refresh intervals + 1 s, and (when
                               // readable) its writer still holds the lock: a readable segment that
                               // nobody locks is never fresh
  std::uint64_t updated_unix_ns = 0;         // the header's (when readable)
  std::uint32_t interval_ms = 0;             // the header's (when readable)
  // Stale: left by a process that has ended. A segment still being refreshed is never stale, whatever
  // its pid says here: its writer may live in another pid namespace (a container with --ipc=host
  // shares /dev/shm, not pids), where our kill() and /proc cannot see it, but where it holds the
  // segment's lock. Once nobody holds that lock the writer is gone, refreshed a moment ago or not.
  bool stale() const { return !alive && !fresh; }
};

// Segments in `directory` named uvmpool-<uid>-<pid>, the current user's only unless `all_users`,
// in pid order. Reads each one's header, not its values. `directory` "": every checked user
// directory (segment_directories) under /dev/shm. A segment whose owner is not the uid of its name,
// or whose header names another pid, is listed unreadable, never read.
std::vector<SegmentInfo> list_segments(bool all_users, const std::string& directory = "");

// The user directories under `root` (/dev/shm/uvmpool-<uid>): the current user's only unless
// `all_users`; each a real directory owned by the uid of its name with no access for others.
std::vector<std::string> segment_directories(bool all_users, const std::string& root = shm::kShmDirectory);

// The one segment of `path` (which need not follow the naming rule, for tests).
SegmentInfo inspect_segment(const std::string& path);

// Copies a segment into `out`: its descriptors, then its values under the seqlock (retried while the
// writer is writing; "busy" after ~100 tries). Read with pread, never mapped: a segment that shrinks
// meanwhile is an error ("truncated"), not a SIGBUS. Refused like list_segments' unreadable ones. Devices are the slots in use, in ordinal order.
bool read_segment(const std::string& path, Report* out, std::string* error);

// Unlinks a stale segment (its process has ended) that the current user owns, after looking at it once
// more; false otherwise.
bool remove_stale(const SegmentInfo& segment);

// "uvmpool-<uid>-<pid>" with both numbers in decimal, maybe followed by ".<instance>" (2 to
// shm::kMaxInstances: shm_layout.h), and nothing else.
bool parse_segment_name(const std::string& name, unsigned* uid, std::int64_t* pid);
// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks since boot.
bool process_start_ticks(std::int64_t pid, std::uint64_t* ticks);
// Whether `pid` runs and is the process that started at `start_ticks` (0: not known, the pid alone
// decides). A pid reused by a later process, or one not running, is not alive.
bool process_alive(std::int64_t pid, std::uint64_t start_ticks);

}  // namespace uvmpool::stats
