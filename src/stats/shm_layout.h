// The shared-memory segment through which a process publishes its live statistics (read by
// uvmpool-stat). One segment per process: /dev/shm/uvmpool-<uid>/uvmpool-<uid>-<pid>, mode 0600, in
// a directory of mode 0700 owned by the user (so the same user, or root, can read it, and no other
// user can put a file under its name), counters only, never memory contents. The writer holds a shared flock on
// the file while it lives (a reader in another pid namespace cannot check the pid). At most
// kMaxDevices devices are published: the first ones the pool served.
//
// Layout (all little-endian, as written by the host):
//   SegmentHeader at offset 0
//   descriptors at descriptors_offset: text, one line per metric, process metrics first, then device
//     metrics: "<scope>\t<name>\t<label>\t<kind>\t<unit>\t<help>\n" with scope "process" or "device",
//     kind "counter"/"gauge", unit "count"/"bytes"/"chunks" (see report.h). Written once, before
//     `magic` is set; never changed afterwards.
//   values at values_offset: u64 words, process_metric_count of them, then max_devices slots of
//     (1 + device_metric_count) words each: the slot's device ordinal (kNoDevice when unused), then
//     its values in descriptor order.
//   labels at labels_offset (labels_bytes long; both 0 when there are none): text written once,
//     before `magic`, one line per fact: "label\t<key>\t<value>\n" (the Kubernetes pod, namespace,
//     container) or "uuid\t<ordinal>\t<uuid>\n". Added after layout version 1 without bumping it:
//     older writers leave both fields 0, older readers never look at them.
// The values are guarded by a seqlock: the writer makes `sequence` odd, writes, makes it even; a
// reader copies everything between two equal even reads of `sequence` (and retries otherwise).
// Readers must check magic, layout_version and every offset against segment_bytes before trusting
// anything. A layout change that old readers could misread bumps kLayoutVersion; new metrics do not
// (they are new descriptor lines).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace uvmpool::stats::shm {

inline constexpr char kMagic[8] = {'U', 'V', 'M', 'P', 'S', 'T', 'A', 'T'};
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr const char* kNamePrefix = "uvmpool-";  // then "<uid>-<pid>", maybe ".<instance>"
inline constexpr const char* kShmDirectory = "/dev/shm";
inline constexpr std::uint64_t kNoDevice = ~std::uint64_t{0};
inline constexpr std::uint32_t kMaxDevices = 16;

enum class State : std::uint32_t { Starting = 0, Running = 1, Exited = 2 };

struct SegmentHeader {
  char magic[8];                    // kMagic once the segment is complete
  std::uint32_t layout_version;     // kLayoutVersion
  std::uint32_t header_bytes;       // sizeof(SegmentHeader)
  std::uint64_t segment_bytes;      // size of the whole segment
  std::int64_t pid;
  std::uint64_t start_ticks;        // /proc/<pid>/stat field 22 (start time in clock ticks since
                                    // boot): tells a live process from a later one with the same pid
  double start_unix_s;              // when the process started publishing
  char version[16];                 // uvmpool's version, NUL-terminated
  char command[256];                // command line, arguments separated by spaces, NUL-terminated
  std::uint32_t process_metric_count;
  std::uint32_t device_metric_count;
  std::uint32_t max_devices;
  std::uint32_t interval_ms;        // how often the values are refreshed
  std::uint32_t descriptors_offset;
  std::uint32_t descriptors_bytes;
  std::uint32_t values_offset;
  std::uint32_t labels_offset;
  std::atomic<std::uint64_t> sequence;         // the seqlock
  std::atomic<std::uint64_t> updated_unix_ns;  // when the values were last written
  std::atomic<std::uint32_t> state;            // State
  std::uint32_t labels_bytes;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the segment's atomics must work across processes");

// "/dev/shm/uvmpool-<uid>": the directory of one user's segments (readers check that it is a
// directory of mode 0700 owned by that uid, and skip it otherwise).
inline std::string user_directory(unsigned uid, const std::string& root = kShmDirectory) {
  return root + "/" + kNamePrefix + std::to_string(uid);
}

// "uvmpool-<uid>-<pid>" (the name in the user's directory), uid being the effective one (the owner).
// A pid names a process only within its pid namespace: where containers share /dev/shm (docker
// --ipc=host), a process whose pid's name is held by a live writer of another namespace takes
// instance 2, 3, ... up to kMaxInstances: "uvmpool-<uid>-<pid>.<instance>".
inline constexpr unsigned kMaxInstances = 16;
inline void segment_name(char* out, std::size_t n, unsigned uid, long pid, unsigned instance = 1) {
  if (instance <= 1) {
    std::snprintf(out, n, "%s%u-%ld", kNamePrefix, uid, pid);
  } else {
    std::snprintf(out, n, "%s%u-%ld.%u", kNamePrefix, uid, pid, instance);
  }
}

}  // namespace uvmpool::stats::shm
