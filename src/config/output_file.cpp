#include "config/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uvmpool::config {

int open_output_file(const std::string& path, OutputMode mode, std::string& error) {
  const int base = O_WRONLY | O_CLOEXEC | O_NOFOLLOW | (mode == OutputMode::Append ? O_APPEND : 0);
  int fd = ::open(path.c_str(), base | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) return fd;
  if (errno != EEXIST) {
    error = std::strerror(errno);
    return -1;
  }
  // It exists. O_NONBLOCK: a fifo planted there must not hang the program; O_NOFOLLOW: a symbolic
  // link fails (ELOOP). Nothing is truncated before the checks below.
  fd = ::open(path.c_str(), base | O_NONBLOCK);
  if (fd < 0) {
    error = errno == ELOOP ? std::string("it is a symbolic link (refused)") : std::strerror(errno);
    return -1;
  }
  struct stat st {};
  const char* refused = nullptr;
  if (fstat(fd, &st) != 0) {
    refused = "cannot stat it";
  } else if (!S_ISREG(st.st_mode)) {
    refused = "it is not a regular file (refused)";
  } else if (st.st_uid != geteuid()) {
    refused = "it belongs to another user (refused)";
  } else if (st.st_nlink != 1) {
    refused = "it has other hard links (refused)";
  }
  if (refused == nullptr && fcntl(fd, F_SETFL, mode == OutputMode::Append ? O_APPEND : 0) != 0) refused = "fcntl failed";
  if (refused == nullptr && mode == OutputMode::Truncate && ftruncate(fd, 0) != 0) refused = "cannot truncate it";
  if (refused != nullptr) {
    ::close(fd);
    error = refused;
    return -1;
  }
  return fd;
}

}  // namespace uvmpool::config
