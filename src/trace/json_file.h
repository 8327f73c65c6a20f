// The trace file: a JSON array of events ("[", events separated by ",\n", "]"), written in large
// buffered writes and never longer than its bound. A fixed reserve at the end always stays free for
// the closing event and "]", so the file ends as valid JSON whenever stop() runs; a killed process
// leaves a file without the "]", which Perfetto and uvmpool-timeline.py accept.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace uvmpool::trace::detail {

class JsonFile {
 public:
  // Creates or truncates `path` (mode 0644 less the umask). `reserve`: the longest last event that
  // finish() may be given. On failure returns false with errno's text in `error`.
  bool open(const std::string& path, std::uint64_t max_bytes, std::size_t reserve, std::string& error);

  // One event: begin() appends the separator and returns the buffer to format the event into;
  // end() keeps it if it fits the bound, else takes it back, marks the file truncated and returns
  // false. `counted`: a recorded event (status().events), not metadata or a counter sample.
  fmt::memory_buffer& begin();
  bool end(bool counted);

  bool truncated() const { return truncated_; }
  bool failed() const { return failed_; }  // a write failed: nothing more is written
  std::size_t buffered() const { return buf_.size(); }

  // Writes out the buffer. On a write error logs one line, marks the file failed and returns false;
  // counted events in the lost buffer move to lost_events().
  bool flush();
  // Appends `last_event` (when not empty) and "]", flushes, closes.
  void finish(std::string_view last_event);
  // A fork child's copy: closes the descriptor, writes nothing.
  void abandon();

  std::uint64_t events_written() const { return events_written_; }
  std::uint64_t lost_events() const { return lost_events_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::uint64_t max_bytes() const { return max_bytes_; }
  const std::string& path() const { return path_; }

 private:
  bool write_all(const char* data, std::size_t size);

  int fd_ = -1;
  std::string path_;
  std::uint64_t max_bytes_ = 0;
  std::size_t reserve_ = 0;
  fmt::memory_buffer buf_;
  std::size_t mark_ = 0;         // buffer size before the event being formatted
  bool any_event_ = false;       // whether a separator is needed before the next event
  bool had_event_before_ = false;
  std::uint64_t pending_events_ = 0;  // counted events in the buffer
  std::uint64_t events_written_ = 0, lost_events_ = 0, bytes_written_ = 0;
  bool truncated_ = false, failed_ = false;
};

// Writes one event's text straight into the buffer: room for it is reserved once, then pieces are
// copied in with no format string to parse and no per-piece size check (the writer formats
// millions of events; fmt::format_to and buffer appends took most of its time). The text written
// must fit `room`; the destructor trims the buffer to what was written.
class EventText {
 public:
  static constexpr std::size_t kRoom = 1024;  // the longest event (an allocation and its spill) is ~600
  explicit EventText(fmt::memory_buffer& b) : b_(b) {
    const std::size_t at = b.size();
    b.resize(at + kRoom);
    p_ = b.data() + at;
  }
  ~EventText() { b_.resize(static_cast<std::size_t>(p_ - b_.data())); }
  EventText(const EventText&) = delete;
  EventText& operator=(const EventText&) = delete;

  EventText& put(std::string_view text) {
    std::memcpy(p_, text.data(), text.size());
    p_ += text.size();
    return *this;
  }
  EventText& dec(std::uint64_t v) {
    char text[20];
    char* q = text + sizeof text;
    do {
      *--q = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    return put({q, static_cast<std::size_t>(text + sizeof text - q)});
  }
  EventText& dec(int v) { return v < 0 ? put("-").dec(std::uint64_t(-(long long)v)) : dec(std::uint64_t(v)); }
  // "0x1f" (the inside of a JSON string: the caller writes the quotes)
  EventText& hex(std::uint64_t v) {
    char text[18];
    char* q = text + sizeof text;
    do {
      *--q = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v != 0);
    *--q = 'x';
    *--q = '0';
    return put({q, static_cast<std::size_t>(text + sizeof text - q)});
  }
  // Nanoseconds as Chrome's microseconds, exact: "12.345".
  EventText& us(std::uint64_t ns) {
    dec(ns / 1000);
    const auto frac = static_cast<unsigned>(ns % 1000);
    const char text[4] = {'.', char('0' + frac / 100), char('0' + frac / 10 % 10), char('0' + frac % 10)};
    return put({text, 4});
  }

 private:
  fmt::memory_buffer& b_;
  char* p_;
};

// `text` as the inside of a JSON string: quotes, backslashes and control characters escaped, bytes
// that are not UTF-8 replaced by U+FFFD (command lines and thread names are arbitrary bytes).
void append_json_string(fmt::memory_buffer& out, std::string_view text);

}  // namespace uvmpool::trace::detail
