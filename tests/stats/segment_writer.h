// A test-only writer of statistics segments that follows src/stats/shm_layout.h to the letter, so the
// reader can be tested without the library's publisher: header at 0, descriptors right after it
// (8-aligned), values after them (8-aligned), the file exactly segment_bytes long, mode 0600, the
// magic written last, values under the seqlock. Tests reach into the bytes to damage them.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "stats/report.h"
#include "stats/shm_layout.h"

namespace uvmpool::stats::test {

inline std::string descriptor_text(const Report& r) {
  std::string text;
  auto add = [&](const char* scope, const MetricInfo& m) {
    text += std::string(scope) + "\t" + m.name + "\t" + m.label + "\t" + kind_name(m.kind) + "\t" + unit_name(m.unit) +
            "\t" + m.help + "\n";
  };
  for (const MetricInfo& m : r.process_metrics) add("process", m);
  for (const MetricInfo& m : r.device_metrics) add("device", m);
  return text;
}

class SegmentWriter {
 public:
  // Publishes `r` (its metrics, values and devices, device i in slot `slots[i]` when given) as the
  // segment `directory`/uvmpool-<uid>-<r.pid>, or at `path` when not empty.
  SegmentWriter(const Report& r, const std::string& directory, unsigned uid, std::uint64_t start_ticks,
                std::vector<std::uint32_t> slots = {}, std::string path = "")
      : report_(r), slots_(std::move(slots)) {
    if (slots_.empty()) {
      for (std::uint32_t i = 0; i < r.devices.size(); ++i) slots_.push_back(i);
    }
    if (path.empty()) {
      char name[64];
      shm::segment_name(name, sizeof name, uid, static_cast<long>(r.pid));
      path = directory + "/" + name;
    }
    path_ = path;
    const std::string descriptors = descriptor_text(r);
    const std::uint32_t descriptors_offset = align8(sizeof(shm::SegmentHeader));
    const std::uint32_t values_offset = align8(descriptors_offset + descriptors.size());
    values_offset_ = values_offset;
    words_ = r.process_metrics.size() + shm::kMaxDevices * (1 + r.device_metrics.size());
    size_ = values_offset + 8 * words_;

    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size_)) != 0) throw std::runtime_error("cannot create " + path_);
    flock(fd_, LOCK_SH);  // as the library's publisher does: held while the writer lives
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cannot map " + path_);
    bytes_ = static_cast<unsigned char*>(p);

    shm::SegmentHeader& h = header();
    h.layout_version = shm::kLayoutVersion;
    h.header_bytes = sizeof(shm::SegmentHeader);
    h.segment_bytes = size_;
    h.pid = r.pid;
    h.start_ticks = start_ticks;
    h.start_unix_s = r.start_unix_s;
    std::strncpy(h.version, r.version.c_str(), sizeof h.version - 1);
    std::strncpy(h.command, r.command.c_str(), sizeof h.command - 1);
    h.process_metric_count = static_cast<std::uint32_t>(r.process_metrics.size());
    h.device_metric_count = static_cast<std::uint32_t>(r.device_metrics.size());
    h.max_devices = shm::kMaxDevices;
    h.interval_ms = 100;
    h.descriptors_offset = descriptors_offset;
    h.descriptors_bytes = static_cast<std::uint32_t>(descriptors.size());
    h.values_offset = values_offset;
    std::memcpy(bytes_ + descriptors_offset, descriptors.data(), descriptors.size());
    for (std::uint32_t slot = 0; slot < shm::kMaxDevices; ++slot) word(slot_base(slot)).store(shm::kNoDevice);
    publish();
    h.state.store(static_cast<std::uint32_t>(r.exited ? shm::State::Exited : shm::State::Running));
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(h.magic, shm::kMagic, sizeof h.magic);  // complete: readers may trust it from now on
  }
  ~SegmentWriter() {
    munmap(bytes_, size_);
    close(fd_);
    if (!keep_) unlink(path_.c_str());
  }
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // Writes the report's values (as changed through report()) under the seqlock. `backwards` writes the
  // last word first, so that a reader copying forwards while this runs would see two rounds mixed.
  void publish(bool backwards = false) {
    std::vector<std::pair<std::size_t, std::uint64_t>> writes;
    for (std::size_t i = 0; i < report_.process_values.size(); ++i) writes.emplace_back(i, report_.process_values[i]);
    for (std::size_t d = 0; d < report_.devices.size(); ++d) {
      const std::size_t base = slot_base(slots_[d]);
      writes.emplace_back(base, static_cast<std::uint64_t>(report_.devices[d].device));
      for (std::size_t m = 0; m < report_.devices[d].values.size(); ++m) {
        writes.emplace_back(base + 1 + m, report_.devices[d].values[m]);
      }
    }
    if (backwards) std::reverse(writes.begin(), writes.end());
    shm::SegmentHeader& h = header();
    const std::uint64_t s = h.sequence.load(std::memory_order_relaxed);
    h.sequence.store(s + 1, std::memory_order_relaxed);  // odd: writing
    std::atomic_thread_fence(std::memory_order_release);
    for (const auto& [i, v] : writes) word(i).store(v, kRelaxed);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    h.updated_unix_ns.store(static_cast<std::uint64_t>(std::chrono::nanoseconds(now).count()), kRelaxed);
    h.sequence.store(s + 2, std::memory_order_release);  // even: done
  }

  Report& report() { return report_; }
  shm::SegmentHeader& header() { return *reinterpret_cast<shm::SegmentHeader*>(bytes_); }
  unsigned char* bytes() { return bytes_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  void keep() { keep_ = true; }
  // The writer dies (a signal, abort()): its lock goes with it, its file stays as it was.
  void end() { flock(fd_, LOCK_UN); }
  // Makes the values look `seconds` old: a segment nobody has refreshed for that long.
  void age(double seconds) {
    const auto ns = header().updated_unix_ns.load();
    header().updated_unix_ns.store(ns - static_cast<std::uint64_t>(seconds * 1e9));
  }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  static std::uint32_t align8(std::size_t n) { return static_cast<std::uint32_t>((n + 7) & ~std::size_t{7}); }
  std::size_t slot_base(std::uint32_t slot) const {
    return report_.process_metrics.size() + slot * (1 + report_.device_metrics.size());
  }
  std::atomic_ref<std::uint64_t> word(std::size_t i) {
    return std::atomic_ref<std::uint64_t>(reinterpret_cast<std::uint64_t*>(bytes_ + values_offset_)[i]);
  }

  Report report_;
  std::vector<std::uint32_t> slots_;
  std::string path_;
  int fd_ = -1;
  unsigned char* bytes_ = nullptr;
  std::size_t size_ = 0, words_ = 0, values_offset_ = 0;  // values_offset_: the header's may be damaged
  bool keep_ = false;
};

}  // namespace uvmpool::stats::test
