#include "trace/json_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "config/log.h"
#include "config/output_file.h"

namespace uvmpool::trace::detail {
namespace {

constexpr std::string_view kOpen = "[\n";
constexpr std::string_view kSeparator = ",\n";
constexpr std::string_view kClose = "\n]\n";

// Length of the UTF-8 sequence starting at s[i] if it is a valid one (the strict rules: no overlong
// forms, no surrogates, nothing above U+10FFFF), else 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = byte(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

void append_json_string(fmt::memory_buffer& out, std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      fmt::format_to(fmt::appender(out), "\\u{:04x}", c);
      ++i;
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (std::size_t n = utf8_length(text, i)) {
      out.append(text.data() + i, text.data() + i + n);
      i += n;
    } else {
      out.append(std::string_view("\\ufffd"));
      ++i;
    }
  }
}

bool JsonFile::open(const std::string& path, std::uint64_t max_bytes, std::size_t reserve, std::string& error) {
  reserve_ = kSeparator.size() + reserve + kClose.size();
  if (max_bytes < kOpen.size() + reserve_) {
    error = fmt::format("a bound of {} bytes leaves no room for any event", max_bytes);
    return false;
  }
  // No symbolic link, no other user's file; a new file is 0600 (config/output_file.h).
  fd_ = config::open_output_file(path, config::OutputMode::Truncate, error);
  if (fd_ < 0) return false;
  path_ = path;
  max_bytes_ = max_bytes;
  buf_.append(kOpen);
  return true;
}

fmt::memory_buffer& JsonFile::begin() {
  mark_ = buf_.size();
  had_event_before_ = any_event_;
  if (any_event_) buf_.append(kSeparator);
  return buf_;
}

bool JsonFile::end(bool counted) {
  if (failed_ || truncated_ || bytes_written_ + buf_.size() + reserve_ > max_bytes_) {
    buf_.resize(mark_);
    any_event_ = had_event_before_;
    if (!failed_) truncated_ = true;
    return false;
  }
  any_event_ = true;
  if (counted) ++pending_events_;
  return true;
}

bool JsonFile::write_all(const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // a regular file that takes nothing is full
      log::warn("trace: writing {} failed ({}); recording stopped", path_, std::strerror(err));
      return false;
    }
    bytes_written_ += static_cast<std::uint64_t>(n);
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool JsonFile::flush() {
  if (failed_ || fd_ < 0) {
    lost_events_ += pending_events_;
    pending_events_ = 0;
    buf_.clear();
    return false;
  }
  if (buf_.size() == 0) return true;
  if (!write_all(buf_.data(), buf_.size())) {
    failed_ = true;
    lost_events_ += pending_events_;
  } else {
    events_written_ += pending_events_;
  }
  pending_events_ = 0;
  buf_.clear();
  // A large burst grows the buffer; give the memory back rather than hold it for the whole run.
  if (buf_.capacity() > (8u << 20)) buf_ = fmt::memory_buffer();
  return !failed_;
}

void JsonFile::finish(std::string_view last_event) {
  if (fd_ < 0) return;
  if (!failed_) {
    if (!last_event.empty()) {
      if (any_event_) buf_.append(kSeparator);
      buf_.append(last_event);
    }
    buf_.append(kClose);
    flush();
  }
  ::close(fd_);
  fd_ = -1;
}

void JsonFile::abandon() {
  if (fd_ >= 0) ::close(fd_);  // the child's descriptor only: the parent's file is untouched
  fd_ = -1;
  failed_ = true;
}

}  // namespace uvmpool::trace::detail
