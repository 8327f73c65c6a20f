#include "config/process_info.h"

#include <fcntl.h>
#include <unistd.h>

namespace uvmpool::config {

std::string expand_pid(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(getpid());
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

std::string command_line() {
  // A plain read: callers may run at exit or on a thread that must not allocate much.
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "?";
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return "?";
  std::string text(buf, static_cast<std::size_t>(n));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text) {
    if (c == '\0') c = ' ';
  }
  return text;
}

}  // namespace uvmpool::config
