#include "stats/publisher.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "config/log.h"
#include "config/options.h"
#include "config/quiet_at_fork.h"
#include "pool/pool.h"
#include "stats/collect.h"
#include "stats/shm_reader.h"
#include "trace/trace.h"

namespace uvmpool::stats {
namespace {

constexpr std::size_t align64(std::size_t n) { return (n + 63) & ~std::size_t{63}; }

void copy_text(char* out, std::size_t n, const std::string& text) {
  const std::size_t len = std::min(n - 1, text.size());
  std::memcpy(out, text.data(), len);
  out[len] = '\0';
}

// Tabs and newlines separate fields and lines: keep them out of the text.
std::string clean(std::string s) {
  std::replace(s.begin(), s.end(), '\t', ' ');
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

void describe(std::string& out, const char* scope, const MetricInfo& m) {
  out += scope;
  out += '\t' + clean(m.name) + '\t' + clean(m.label) + '\t' + kind_name(m.kind) + '\t' + unit_name(m.unit) + '\t' +
         clean(m.help) + '\n';
}

// The labels section (shm_layout.h): facts that label the figures, written once.
std::string label_lines(const Report& r) {
  std::string out;
  for (const auto& [key, value] : r.labels) out += "label\t" + clean(key) + '\t' + clean(value) + '\n';
  for (std::size_t d = 0; d < r.device_uuids.size(); ++d) {
    if (!r.device_uuids[d].empty()) out += "uuid\t" + std::to_string(d) + '\t' + clean(r.device_uuids[d]) + '\n';
  }
  return out;
}

// Whether another process holds the segment at `path` (its lock, taken as it is made and held until
// it dies): a writer of the same pid in another pid namespace sharing /dev/shm.
bool held_by_a_writer(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // drops our probe's lock, if we got it
  return held;
}

// Creates the file only if it does not exist: never opens a file someone else put there. -1 with
// errno EEXIST (and *live) when a live writer holds it.
int create_exclusive(const std::string& path, bool* live) {
  *live = false;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by an earlier process of the same user with the same pid (killed before it could remove
    // it): ours to replace (in our own directory nobody else can put a file). One a writer still
    // holds is another namespace's process's.
    struct stat st {};
    *live = held_by_a_writer(path);
    if (!*live && lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        unlink(path.c_str()) == 0) {
      fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    } else {
      errno = EEXIST;
    }
  }
  return fd;
}

}  // namespace

// The user's segment directory: made 0700 if missing; used only if it is a real directory (not a
// link) that this user owns and nobody else can enter. Another user could make it first; then the
// statistics are off (and say why), but nothing is ever written where that user could read or swap it.
bool prepare_user_directory(const std::string& dir, std::string* error) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = dir + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    *error = dir + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = dir + ": not a directory (refused)";
  } else if (st.st_uid != geteuid()) {
    *error = dir + ": belongs to uid " + std::to_string(st.st_uid) + " (refused)";
  } else if ((st.st_mode & 077) != 0 && chmod(dir.c_str(), 0700) != 0) {
    *error = dir + ": open to other users and cannot be made private (refused)";
  } else {
    return true;
  }
  return false;
}

std::unique_ptr<Segment> Segment::create(const Report& first, std::uint32_t interval_ms, std::string* error,
                                         const std::string& given_dir) {
  const std::string dir = given_dir.empty() ? shm::user_directory(geteuid()) : given_dir;
  if (given_dir.empty() && !prepare_user_directory(dir, error)) return nullptr;
  std::string descriptors;
  for (const MetricInfo& m : first.process_metrics) describe(descriptors, "process", m);
  for (const MetricInfo& m : first.device_metrics) describe(descriptors, "device", m);
  const std::size_t descriptors_offset = align64(sizeof(shm::SegmentHeader));
  const std::size_t values_offset = align64(descriptors_offset + descriptors.size());
  const std::size_t words = first.process_metrics.size() + shm::kMaxDevices * (1 + first.device_metrics.size());
  const std::string labels = label_lines(first);
  const std::size_t labels_offset = labels.empty() ? 0 : align64(values_offset + words * sizeof(std::uint64_t));
  const std::size_t bytes =
      labels.empty() ? values_offset + words * sizeof(std::uint64_t) : labels_offset + labels.size();

  std::unique_ptr<Segment> s(new Segment);
  int fd = -1;
  bool live = true;
  for (unsigned instance = 1; fd < 0 && live && instance <= shm::kMaxInstances; ++instance) {
    char name[64];
    shm::segment_name(name, sizeof(name), geteuid(), static_cast<long>(getpid()), instance);
    s->path_ = dir + "/" + name;
    fd = create_exclusive(s->path_, &live);
  }
  if (fd < 0) {
    *error = s->path_ + ": " + std::strerror(errno);
    return nullptr;
  }
  fchmod(fd, 0600);  // whatever the umask: the owner writes, nobody else reads
  void* base = ftruncate(fd, static_cast<off_t>(bytes)) == 0
                   ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  const int saved = errno;
  if (base == MAP_FAILED) {
    close(fd);
    *error = s->path_ + ": " + std::strerror(saved);
    ::unlink(s->path_.c_str());
    return nullptr;
  }
  // Held while the process lives (the kernel drops it when it dies): readers in another pid
  // namespace (docker --ipc=host) cannot check the pid, but can see the lock.
  flock(fd, LOCK_SH);
  s->fd_ = fd;
  s->base_ = base;
  s->bytes_ = bytes;
  s->process_count_ = first.process_metrics.size();
  s->device_count_ = first.device_metrics.size();

  auto* h = new (base) shm::SegmentHeader{};  // the file is zero-filled: magic stays unset for now
  h->layout_version = shm::kLayoutVersion;
  h->header_bytes = sizeof(shm::SegmentHeader);
  h->segment_bytes = bytes;
  h->pid = first.pid;
  process_start_ticks(getpid(), &h->start_ticks);  // tells this process from a later one with its pid
  h->start_unix_s = first.start_unix_s;
  copy_text(h->version, sizeof(h->version), first.version);
  copy_text(h->command, sizeof(h->command), first.command);
  h->process_metric_count = static_cast<std::uint32_t>(first.process_metrics.size());
  h->device_metric_count = static_cast<std::uint32_t>(first.device_metrics.size());
  h->max_devices = shm::kMaxDevices;
  h->interval_ms = interval_ms;
  h->descriptors_offset = static_cast<std::uint32_t>(descriptors_offset);
  h->descriptors_bytes = static_cast<std::uint32_t>(descriptors.size());
  h->values_offset = static_cast<std::uint32_t>(values_offset);
  std::memcpy(static_cast<char*>(base) + descriptors_offset, descriptors.data(), descriptors.size());
  h->labels_offset = static_cast<std::uint32_t>(labels_offset);
  h->labels_bytes = static_cast<std::uint32_t>(labels.size());
  std::memcpy(static_cast<char*>(base) + labels_offset, labels.data(), labels.size());
  s->write(first);
  h->state.store(static_cast<std::uint32_t>(shm::State::Running), std::memory_order_relaxed);
  // Readers trust nothing before the magic: it goes last.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, shm::kMagic, sizeof(h->magic));
  return s;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

void Segment::write(const Report& r) {
  auto* h = static_cast<shm::SegmentHeader*>(base_);
  auto* values = reinterpret_cast<std::uint64_t*>(static_cast<char*>(base_) + h->values_offset);
  auto put = [&](std::size_t i, std::uint64_t v) { std::atomic_ref<std::uint64_t>(values[i]).store(v, std::memory_order_relaxed); };
  const std::uint64_t seq = h->sequence.load(std::memory_order_relaxed);
  h->sequence.store(seq + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < process_count_; ++i) put(i, i < r.process_values.size() ? r.process_values[i] : 0);
  for (std::size_t slot = 0; slot < shm::kMaxDevices; ++slot) {
    const std::size_t at = process_count_ + slot * (1 + device_count_);
    const DeviceValues* d = slot < r.devices.size() ? &r.devices[slot] : nullptr;
    put(at, d != nullptr ? static_cast<std::uint64_t>(d->device) : shm::kNoDevice);
    for (std::size_t i = 0; i < device_count_; ++i) put(at + 1 + i, d != nullptr && i < d->values.size() ? d->values[i] : 0);
  }
  h->updated_unix_ns.store(static_cast<std::uint64_t>(r.updated_unix_s * 1e9), std::memory_order_relaxed);
  h->sequence.store(seq + 2, std::memory_order_release);
}

void Segment::set_state(shm::State state) {
  static_cast<shm::SegmentHeader*>(base_)->state.store(static_cast<std::uint32_t>(state), std::memory_order_release);
}

void Segment::unlink() { ::unlink(path_.c_str()); }

void Segment::close_inherited() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

std::unique_ptr<Publisher> Publisher::start(std::function<Report()> collect, std::uint32_t interval_ms,
                                            const std::string& dir) {
  std::string error;
  auto segment = Segment::create(collect(), interval_ms, &error, dir);
  if (!segment) {
    log::warn("live statistics are off: cannot create the shared-memory segment {} (UVMPOOL_STATS_SHM=0 silences this)", error);
    return nullptr;
  }
  std::unique_ptr<Publisher> p(new Publisher);
  p->collect_ = std::move(collect);
  p->segment_ = std::move(segment);
  p->interval_ms_ = interval_ms;
  // Returns once the thread holds the fork lock, so that a fork right after the start does not land
  // in the thread's start, which allocates (config/quiet_at_fork.h).
  std::latch quiet_taken(1);
  p->thread_ = std::thread([raw = p.get(), &quiet_taken] { raw->run(&quiet_taken); });
  quiet_taken.wait();
  return p;
}

Publisher::~Publisher() {
  if (!stopped_) stop(false);
}

void Publisher::run(std::latch* quiet_taken) {
  std::size_t removed = 0;
  {
    const config::QuietAtFork quiet;
    quiet_taken->count_down();
    pthread_setname_np(pthread_self(), "uvmpool-stats");
    const std::string& own = segment_->path();
    for (const SegmentInfo& s : list_segments(false, own.substr(0, own.rfind('/')))) {
      if (s.path != own && remove_stale(s)) ++removed;
    }
  }
  if (removed != 0) log::debug("removed {} stale statistics segment(s) of ended processes", removed);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_));
    if (stopping_) break;
    lock.unlock();
    {
      const config::QuietAtFork quiet;  // a fork waits for this update (config/quiet_at_fork.h)
      segment_->write(collect_());
    }
    lock.lock();
  }
}

void Publisher::stop(bool keep) {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  segment_->write(collect_());
  segment_->set_state(shm::State::Exited);
  if (!keep) segment_->unlink();
}

void Publisher::abandon() {
  // The thread does not exist in the child and the segment's file is the parent's: only our copy of
  // its descriptor and mapping go. The caller leaks this object (a joinable std::thread must not be
  // destroyed), and with it the Segment (no allocator call after fork).
  stopped_ = true;
  segment_->close_inherited();
  (void)segment_.release();
}

}  // namespace uvmpool::stats
