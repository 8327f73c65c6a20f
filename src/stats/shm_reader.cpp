// The reader of published segments (shm_reader.h). The header is copied field by field once and only
// that copy is trusted afterwards, so a writer changing the header while we read cannot move an offset
// past a check; every region is checked against the size of the file that was read. Nothing is
// mapped: the file is read with pread into our own memory (a segment that shrinks while mapped would
// kill the reader with SIGBUS; a short pread is an error instead).
#include "stats/shm_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace uvmpool::stats {

namespace {

// Bounds no real segment comes near (a few KiB, dozens of metrics, kMaxDevices slots); they keep every
// size computation far from overflow whatever a hostile header says.
constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{64} << 20;
constexpr std::uint32_t kMaxMetrics = 1u << 16;
constexpr std::uint32_t kMaxSlots = 1024;
constexpr int kSeqlockTries = 100;
constexpr auto kSeqlockPause = std::chrono::microseconds(200);
constexpr std::uint64_t kNewFileNs = 5'000'000'000;  // how long a segment without its magic may be in the making

std::string printable(const char* text, std::size_t capacity) {
  std::string out(text, strnlen(text, capacity));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // no terminal escapes from a segment
  }
  return out;
}

// An open segment file and a copy of its bytes as they were when opened (read with pread). The
// seqlocked values are read again from the file (read_at) each time they are copied.
class Mapped {
 public:
  ~Mapped() {
    if (fd_ >= 0) close(fd_);
  }
  bool open(const std::string& path, std::string* error);
  int fd() const { return fd_; }
  unsigned owner() const { return owner_; }
  std::size_t size() const { return size_; }
  const unsigned char* data() const { return reinterpret_cast<const unsigned char*>(copy_.data()); }
  const shm::SegmentHeader& header() const { return *reinterpret_cast<const shm::SegmentHeader*>(copy_.data()); }
  // Reads `n` bytes at `offset` of the file now; false when the file is shorter (it shrank).
  bool read_at(void* out, std::size_t n, std::uint64_t offset) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
    return true;
  }

 private:
  int fd_ = -1;
  unsigned owner_ = 0;
  std::size_t size_ = 0;
  std::vector<std::uint64_t> copy_;  // 8-byte aligned, for the header's fields
};

bool Mapped::open(const std::string& path, std::string* error) {
  // O_NOFOLLOW and O_NONBLOCK: a link or a FIFO planted under a segment's name is refused, never
  // followed or waited on (root reads every user's segments).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd_ < 0) {
    const int e = errno;
    struct stat st {};
    if (e == EACCES || e == EPERM) {
      *error = "permission denied";
      if (lstat(path.c_str(), &st) == 0) *error += ": the segment belongs to uid " + std::to_string(st.st_uid);
    } else if (e == ENOENT) {
      *error = "no such segment (the process has ended or never published)";
    } else if (e == ELOOP) {
      *error = "not a regular file (a symbolic link)";
    } else {
      *error = std::strerror(e);
    }
    return false;
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    *error = std::strerror(errno);
    return false;
  }
  owner_ = st.st_uid;
  if (!S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    return false;
  }
  if (static_cast<std::uint64_t>(st.st_size) < sizeof(shm::SegmentHeader)) {
    *error = "truncated: " + std::to_string(st.st_size) + " bytes, less than the header's " +
             std::to_string(sizeof(shm::SegmentHeader));
    return false;
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxSegmentBytes) {
    *error = "too large for a segment: " + std::to_string(st.st_size) + " bytes";
    return false;
  }
  size_ = static_cast<std::size_t>(st.st_size);
  copy_.assign((size_ + 7) / 8, 0);
  if (!read_at(copy_.data(), size_, 0)) {
    *error = "truncated while being read (the segment shrank)";
    size_ = 0;
    return false;
  }
  return true;
}

// The header's fields that are written once, before the magic: copied, then checked.
struct Header {
  std::uint64_t segment_bytes = 0;
  std::int64_t pid = 0;
  std::uint64_t start_ticks = 0;
  double start_unix_s = 0;
  std::string version, command;
  std::uint32_t process_metrics = 0, device_metrics = 0, max_devices = 0, interval_ms = 0;
  std::uint32_t descriptors_offset = 0, descriptors_bytes = 0, values_offset = 0;
  std::uint32_t labels_offset = 0, labels_bytes = 0;  // 0, 0: none (or a writer older than labels)
  std::uint64_t value_words() const {
    return process_metrics + std::uint64_t{max_devices} * (1 + std::uint64_t{device_metrics});
  }
};

bool read_header(const Mapped& m, Header* h, std::string* error) {
  const shm::SegmentHeader& s = m.header();
  char magic[sizeof shm::kMagic];
  std::memcpy(magic, s.magic, sizeof magic);
  if (std::all_of(magic, magic + sizeof magic, [](char c) { return c == 0; })) {
    *error = "not ready: the process is still setting up its segment";
    return false;
  }
  if (std::memcmp(magic, shm::kMagic, sizeof magic) != 0) {
    *error = "not a uvmpool statistics segment (bad magic)";
    return false;
  }
  std::atomic_thread_fence(std::memory_order_acquire);  // the writer sets the magic after everything else
  if (s.layout_version != shm::kLayoutVersion) {
    *error = "layout version " + std::to_string(s.layout_version) + ", this reader knows version " +
             std::to_string(shm::kLayoutVersion) + " (a different uvmpool release)";
    return false;
  }
  const std::uint64_t header_bytes = s.header_bytes;
  h->segment_bytes = s.segment_bytes;
  h->pid = s.pid;
  h->start_ticks = s.start_ticks;
  h->start_unix_s = s.start_unix_s;
  h->version = printable(s.version, sizeof s.version);
  h->command = printable(s.command, sizeof s.command);
  h->process_metrics = s.process_metric_count;
  h->device_metrics = s.device_metric_count;
  h->max_devices = s.max_devices;
  h->interval_ms = s.interval_ms;
  h->descriptors_offset = s.descriptors_offset;
  h->descriptors_bytes = s.descriptors_bytes;
  h->values_offset = s.values_offset;
  h->labels_offset = s.labels_offset;
  h->labels_bytes = s.labels_bytes;

  auto fail = [&](const std::string& why) {
    *error = "corrupt segment: " + why;
    return false;
  };
  if (h->segment_bytes > m.size()) {
    return fail("the header says " + std::to_string(h->segment_bytes) + " bytes, the file has " +
                std::to_string(m.size()));
  }
  if (header_bytes < sizeof(shm::SegmentHeader) || header_bytes > h->segment_bytes) return fail("bad header size");
  if (h->pid <= 0 || h->pid > INT_MAX) return fail("bad pid " + std::to_string(h->pid));
  if (h->process_metrics > kMaxMetrics || h->device_metrics > kMaxMetrics || h->max_devices > kMaxSlots) {
    return fail("implausible metric or device counts");
  }
  const std::uint64_t d_begin = h->descriptors_offset, d_end = d_begin + h->descriptors_bytes;
  const std::uint64_t v_begin = h->values_offset, v_end = v_begin + 8 * h->value_words();
  if (d_begin < header_bytes || d_end > h->segment_bytes) return fail("descriptors outside the segment");
  if (v_begin < header_bytes || v_end > h->segment_bytes || v_begin % 8 != 0) return fail("values outside the segment");
  if (d_begin < v_end && v_begin < d_end) return fail("descriptors and values overlap");
  const std::uint64_t l_begin = h->labels_offset, l_end = l_begin + h->labels_bytes;
  if (h->labels_bytes != 0 && (l_begin < header_bytes || l_end > h->segment_bytes || (l_begin < v_end && v_begin < l_end) ||
                               (l_begin < d_end && d_begin < l_end))) {
    return fail("labels outside the segment or overlapping it");
  }
  return true;
}

bool valid_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// "<scope>\t<name>\t<label>\t<kind>\t<unit>\t<help>\n" per metric, process metrics first. An unknown
// kind or unit (a newer writer's) reads as a gauge / a plain count rather than failing the segment.
bool parse_descriptors(const Header& h, const std::string& text, Report* out, std::string* error) {
  const std::uint64_t expected = std::uint64_t{h.process_metrics} + h.device_metrics;
  std::size_t pos = 0;
  for (std::uint64_t i = 0; i < expected; ++i) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) {
      *error = "corrupt segment: " + std::to_string(i) + " descriptors, the header says " + std::to_string(expected);
      return false;
    }
    std::string fields[6];
    std::size_t f = 0, start = pos;
    for (; f < 5; ++f) {  // the help (last) may hold tabs
      const std::size_t tab = text.find('\t', start);
      if (tab == std::string::npos || tab > end) break;
      fields[f] = text.substr(start, tab - start);
      start = tab + 1;
    }
    fields[5] = text.substr(start, end - start);
    pos = end + 1;
    const bool is_process = i < h.process_metrics;
    MetricInfo info;
    info.name = fields[1];
    info.label = fields[2];
    const bool label_ok = info.label.empty() || valid_name(label_key(info.label));
    if (f != 5 || fields[0] != (is_process ? "process" : "device") || !valid_name(info.name) || !label_ok) {
      *error = "corrupt segment: bad descriptor " + std::to_string(i);
      return false;
    }
    for (char& c : info.label) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    if (!parse_kind(fields[3], &info.kind)) info.kind = Kind::Gauge;
    if (!parse_unit(fields[4], &info.unit)) info.unit = Unit::Count;
    info.help = fields[5];
    for (char& c : info.help) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    }
    (is_process ? out->process_metrics : out->device_metrics).push_back(std::move(info));
  }
  return true;
}

// "label\t<key>\t<value>\n" and "uuid\t<ordinal>\t<uuid>\n" lines. Lines this reader does not know
// (a newer writer's) or cannot use are skipped: labels are extras, never a reason to refuse figures.
void parse_labels(const std::string& text, Report* out) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t tab1 = line.find('\t'), tab2 = tab1 == std::string::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string::npos) continue;
    const std::string kind = line.substr(0, tab1), key = line.substr(tab1 + 1, tab2 - tab1 - 1);
    std::string value = line.substr(tab2 + 1);
    for (char& c : value) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    if (kind == "label" && valid_name(key)) {
      out->labels.emplace_back(key, std::move(value));
    } else if (kind == "uuid" && !key.empty() && key.size() <= 4 &&
               std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const std::size_t ordinal = std::stoul(key);
      if (ordinal >= kMaxSlots) continue;
      if (out->device_uuids.size() <= ordinal) out->device_uuids.resize(ordinal + 1);
      out->device_uuids[ordinal] = std::move(value);
    }
  }
}

// Copies the values between two equal even reads of the sequence.
bool copy_values(const Mapped& m, const Header& h, std::vector<std::uint64_t>* words, std::uint64_t* updated_ns,
                 std::uint32_t* state, std::string* error) {
  // Read from the file each time (pread): the writer stores these words while we copy them; a copy
  // between two equal even reads of the sequence is sound, a torn one is retried.
  words->resize(h.value_words());
  constexpr std::uint64_t kSequence = offsetof(shm::SegmentHeader, sequence);
  constexpr std::uint64_t kUpdated = offsetof(shm::SegmentHeader, updated_unix_ns);
  constexpr std::uint64_t kState = offsetof(shm::SegmentHeader, state);
  for (int attempt = 0; attempt < kSeqlockTries; ++attempt) {
    std::uint64_t before = 0, after = 0;
    bool ok = m.read_at(&before, sizeof before, kSequence);
    if (ok && before % 2 == 0) {
      ok = m.read_at(words->data(), words->size() * sizeof(std::uint64_t), h.values_offset) &&
           m.read_at(updated_ns, sizeof *updated_ns, kUpdated) && m.read_at(state, sizeof *state, kState) &&
           m.read_at(&after, sizeof after, kSequence);
      if (ok && after == before) return true;
    }
    if (!ok) {
      *error = "truncated while being read (the segment shrank)";
      return false;
    }
    std::this_thread::sleep_for(kSeqlockPause);
  }
  *error = "busy: the writer kept updating the values while they were read";
  return false;
}

// Whether `unix_ns` lies within `window_ns` of now (either way: clocks may be set back).
bool within(std::uint64_t unix_ns, std::uint64_t window_ns) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto now_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  return (now_ns > unix_ns ? now_ns - unix_ns : unix_ns - now_ns) < window_ns;
}

bool header_of(const std::string& path, Mapped* m, Header* h, std::string* error) {
  return m->open(path, error) && read_header(*m, h, error);
}

// A segment named uvmpool-<uid>-<pid> must be owned by that uid and say that pid in its header:
// another user's file under my name is never read as mine.
bool identity_ok(const std::string& path, const Mapped& m, const Header& h, std::string* error) {
  const std::string name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  unsigned uid = 0;
  std::int64_t pid = 0;
  if (!parse_segment_name(name, &uid, &pid)) return true;  // tests read files of other names
  if (m.owner() != uid) {
    *error = "refused: owned by uid " + std::to_string(m.owner()) + ", not uid " + std::to_string(uid) + " as its name says";
    return false;
  }
  if (h.pid != pid) {
    *error = "corrupt segment: the header names pid " + std::to_string(h.pid);
    return false;
  }
  return true;
}

}  // namespace

bool parse_segment_name(const std::string& name, unsigned* uid, std::int64_t* pid) {
  const std::string prefix = shm::kNamePrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  const std::size_t dash = rest.find('-');
  if (dash == std::string::npos) return false;
  auto number = [](const std::string& text, std::uint64_t max, std::uint64_t* value) {
    const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (text.empty() || text.size() > 19 || !digits) return false;
    *value = std::stoull(text);
    return *value <= max;
  };
  std::string pid_text = rest.substr(dash + 1);
  if (const std::size_t dot = pid_text.find('.'); dot != std::string::npos) {
    std::uint64_t instance = 0;
    if (!number(pid_text.substr(dot + 1), shm::kMaxInstances, &instance) || instance < 2) return false;
    pid_text.resize(dot);
  }
  std::uint64_t u = 0, p = 0;
  if (!number(rest.substr(0, dash), UINT_MAX, &u) || !number(pid_text, INT_MAX, &p) || p == 0) {
    return false;
  }
  *uid = static_cast<unsigned>(u);
  *pid = static_cast<std::int64_t>(p);
  return true;
}

bool process_start_ticks(std::int64_t pid, std::uint64_t* ticks) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  // "pid (comm) state ppid ...": comm may hold spaces and ')', so count fields from the last ')'.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int n = 3; n <= 22; ++n) {
    if (!(fields >> field)) return false;
  }
  if (field.empty() || !std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *ticks = std::stoull(field);
  return true;
}

bool process_alive(std::int64_t pid, std::uint64_t start_ticks) {
  if (pid <= 0 || pid > INT_MAX) return false;  // never kill(0) or kill(-1): those name groups
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::uint64_t ticks = 0;
  // Without /proc (hidepid, another mount) the pid alone decides.
  if (start_ticks != 0 && process_start_ticks(pid, &ticks) && ticks != start_ticks) return false;
  return true;
}

SegmentInfo inspect_segment(const std::string& path) {
  SegmentInfo info;
  info.path = path;
  info.name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  const bool named = parse_segment_name(info.name, &info.uid, &info.pid);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) info.owner_uid = st.st_uid;
  Mapped m;
  Header h;
  const bool valid = header_of(path, &m, &h, &info.error) && identity_ok(path, m, h, &info.error);
  if (!valid) {
    info.alive = named && process_alive(info.pid, 0);
    // Not ready yet, or damaged: a file made in the last seconds may be a writer still setting it up.
    info.fresh = st.st_mtime != 0 && within(static_cast<std::uint64_t>(st.st_mtime) * 1000000000, kNewFileNs);
  } else {
    info.readable = true;
    info.pid = h.pid;
    info.start_ticks = h.start_ticks;
    info.state = static_cast<shm::State>(m.header().state.load(std::memory_order_relaxed));
    info.alive = process_alive(h.pid, h.start_ticks);
    info.interval_ms = h.interval_ms;
    info.updated_unix_ns = m.header().updated_unix_ns.load(std::memory_order_relaxed);
    info.fresh = info.state != shm::State::Exited &&
                 within(info.updated_unix_ns, (3 * std::uint64_t{h.interval_ms} + 1000) * 1000000);
  }
  // A writer holding a lock on its segment is alive whatever its pid says here: in another pid
  // namespace (a container sharing /dev/shm) its pid means nothing to us. Our probe is momentary.
  if (!info.alive && m.fd() >= 0) {
    if (flock(m.fd(), LOCK_EX | LOCK_NB) != 0) {
      info.alive = errno == EWOULDBLOCK;
    } else {
      flock(m.fd(), LOCK_UN);
      // Every writer locks its segment before the magic makes it readable, and holds the lock until
      // it dies, so a readable segment nobody locks has no writer left, however recent its values: a
      // process ended by abort() or a signal (NCCL's watchdog) must not keep it for seconds more.
      if (valid) info.fresh = false;
    }
  }
  return info;
}

std::vector<std::string> segment_directories(bool all_users, const std::string& root) {
  std::vector<std::string> out;
  DIR* dir = opendir(root.c_str());
  if (dir == nullptr) return out;
  const unsigned me = geteuid();
  const std::string prefix = shm::kNamePrefix;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 10 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const std::uint64_t uid = std::stoull(digits);
    if (uid > UINT_MAX || (!all_users && uid != me)) continue;
    struct stat st {};
    const std::string path = root + "/" + name;
    // Only a real directory of that user that nobody else can enter: anything else under the name
    // was put there by someone else.
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077) != 0) continue;
    out.push_back(path);
  }
  closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<SegmentInfo> list_segments(bool all_users, const std::string& directory) {
  std::vector<SegmentInfo> out;
  if (directory.empty()) {
    for (const std::string& d : segment_directories(all_users)) {
      std::vector<SegmentInfo> some = list_segments(all_users, d);
      out.insert(out.end(), std::make_move_iterator(some.begin()), std::make_move_iterator(some.end()));
    }
    std::sort(out.begin(), out.end(), [](const SegmentInfo& a, const SegmentInfo& b) {
      return a.pid != b.pid ? a.pid < b.pid : a.uid < b.uid;
    });
    return out;
  }
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return out;
  const unsigned me = geteuid();
  while (const dirent* entry = readdir(dir)) {
    unsigned uid = 0;
    std::int64_t pid = 0;
    if (!parse_segment_name(entry->d_name, &uid, &pid) || (!all_users && uid != me)) continue;
    out.push_back(inspect_segment(directory + "/" + entry->d_name));
  }
  closedir(dir);
  std::sort(out.begin(), out.end(), [](const SegmentInfo& a, const SegmentInfo& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.uid < b.uid;
  });
  return out;
}

bool read_segment(const std::string& path, Report* out, std::string* error) {
  std::string scratch;
  if (error == nullptr) error = &scratch;
  Mapped m;
  Header h;
  if (!header_of(path, &m, &h, error) || !identity_ok(path, m, h, error)) return false;
  Report r;
  r.pid = h.pid;
  r.command = h.command;
  r.version = h.version;
  r.start_unix_s = h.start_unix_s;
  const std::string descriptors(reinterpret_cast<const char*>(m.data()) + h.descriptors_offset, h.descriptors_bytes);
  if (!parse_descriptors(h, descriptors, &r, error)) return false;
  parse_labels(std::string(reinterpret_cast<const char*>(m.data()) + h.labels_offset, h.labels_bytes), &r);

  std::vector<std::uint64_t> words;
  std::uint64_t updated_ns = 0;
  std::uint32_t state = 0;
  if (!copy_values(m, h, &words, &updated_ns, &state, error)) return false;
  r.updated_unix_s = static_cast<double>(updated_ns) / 1e9;
  r.exited = state == static_cast<std::uint32_t>(shm::State::Exited);
  r.process_values.assign(words.begin(), words.begin() + h.process_metrics);
  const std::size_t slot_words = 1 + std::size_t{h.device_metrics};
  for (std::uint32_t slot = 0; slot < h.max_devices; ++slot) {
    const auto first = words.begin() + h.process_metrics + slot * slot_words;
    const std::uint64_t ordinal = *first;
    if (ordinal == shm::kNoDevice) continue;
    if (ordinal > INT_MAX) {
      *error = "corrupt segment: device slot " + std::to_string(slot) + " holds ordinal " + std::to_string(ordinal);
      return false;
    }
    const bool repeated = std::any_of(r.devices.begin(), r.devices.end(),
                                      [&](const DeviceValues& d) { return d.device == static_cast<int>(ordinal); });
    if (repeated) continue;
    r.devices.push_back(DeviceValues{static_cast<int>(ordinal), {first + 1, first + slot_words}});
  }
  std::sort(r.devices.begin(), r.devices.end(), [](const auto& a, const auto& b) { return a.device < b.device; });
  *out = std::move(r);
  return true;
}

bool remove_stale(const SegmentInfo& segment) {
  const unsigned me = geteuid();
  if (!segment.stale() || segment.uid != me) return false;
  struct stat st {};
  if (lstat(segment.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me) return false;
  // Look again just before unlinking: a new process with the same pid may have published meanwhile.
  if (!inspect_segment(segment.path).stale()) return false;
  return unlink(segment.path.c_str()) == 0;
}

}  // namespace uvmpool::stats
