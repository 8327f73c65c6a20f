#include "hooks/ipc_socket.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "config/quiet_at_fork.h"
#include "hooks/ipc_handle.h"
#include "stats/publisher.h"
#include "stats/shm_layout.h"

namespace uvmpool::ipc {
namespace {

bool fill_address(const std::string& path, sockaddr_un* addr, std::string* error) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof addr->sun_path) {
    *error = path + ": too long for a socket path";
    return false;
  }
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Waits until `fd` is ready for `events`, or false at the deadline, on an error, or when `abort_fd`
// is readable.
bool wait_ready(int fd, short events, Deadline deadline, int abort_fd) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {abort_fd, POLLIN, 0}};
    const int timeout = static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000));
    int r = 0;
    {
      const config::ForkMayLandHere waiting;  // a slow peer does not hold a fork off (the IPC server)
      r = poll(fds, abort_fd >= 0 ? 2 : 1, timeout);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (abort_fd >= 0 && fds[1].revents != 0) return false;
    if (fds[0].revents != 0) return true;  // ready, or an error the next call reports
  }
}

// One sendmsg/recvmsg without blocking, waiting for readiness by the deadline: its result, or -1.
template <typename Call>
ssize_t by_deadline(int fd, short events, Deadline deadline, int abort_fd, Call call) {
  for (;;) {
    const ssize_t r = call();
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!wait_ready(fd, events, deadline, abort_fd)) return -1;
  }
}

// A new stream socket and the address of `path`, or -1 and *error.
int new_socket(const std::string& path, sockaddr_un* addr, std::string* error) {
  if (!fill_address(path, addr, error)) return -1;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) *error = errno_text("socket");
  return fd;
}

// The socket's name in the user's directory: `ipc-<pid>`, and `-<token>` in hex after it unless the
// token is 0 (a handle from a build before tokens).
std::string socket_name(pid_t pid, std::uint64_t token) {
  std::string name = "ipc-" + std::to_string(pid);
  if (token != 0) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
    name += std::string("-") + hex;
  }
  return name;
}

// Process `pid`'s pid in the innermost pid namespace it belongs to (the last of its status's NStgid),
// or -1 when that cannot be read (no such process, no /proc, a kernel before 4.1).
pid_t innermost_pid(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return -1;
  char line[512];
  pid_t last = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "NStgid:", 7) != 0) continue;
    for (char* p = line + 7; *p != '\0';) {  // "NStgid:\t4242\t17\t1\n": outermost first
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      if (end == p) break;
      last = static_cast<pid_t>(v);
      p = end;
    }
    break;
  }
  std::fclose(f);
  return last;
}

// The uid the kernel reports for one it cannot map into this user namespace.
uid_t overflow_uid() {
  static const uid_t value = [] {
    unsigned v = 65534;
    if (std::FILE* f = std::fopen("/proc/sys/kernel/overflowuid", "re")) {
      if (std::fscanf(f, "%u", &v) != 1) v = 65534;
      std::fclose(f);
    }
    return static_cast<uid_t>(v);
  }();
  return value;
}

}  // namespace

std::string socket_path(pid_t pid, std::uint64_t token, std::string* error) {
  const std::string dir = stats::shm::user_directory(geteuid());
  if (!stats::prepare_user_directory(dir, error)) return "";
  return dir + "/" + socket_name(pid, token);
}

int remove_stale_sockets(pid_t pid) {
  std::string error;
  const std::string dir = stats::shm::user_directory(geteuid());
  if (!stats::prepare_user_directory(dir, &error)) return 0;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  const std::string name = socket_name(pid, 0);  // and every token's after it
  int removed = 0;
  while (const dirent* e = readdir(d)) {
    const std::string entry = e->d_name;
    if (entry != name && entry.rfind(name + "-", 0) != 0) continue;
    const std::string path = dir + "/" + entry;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) continue;
    // Nothing listens on a socket whose process is gone: connect is refused at once. A live listener
    // takes the connection (or its backlog is full): left alone, and the connection closed unused,
    // which its server tells from an importer's (ipc_export.cpp).
    sockaddr_un addr;
    const int fd = fill_address(path, &addr, &error) ? socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) : -1;
    if (fd < 0) continue;
    const bool refused = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED;
    close(fd);
    if (refused && unlink(path.c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

int listen_at(const std::string& path, std::string* error) {
  sockaddr_un addr;
  const int fd = new_socket(path, &addr, error);
  if (fd < 0) return -1;
  // A socket left by a killed process of the same pid and token: ours to replace (nobody else can
  // write in the directory). Anything else there is refused.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid() || unlink(path.c_str()) != 0) {
      *error = path + ": exists and is not a stale socket of ours (refused)";
      close(fd);
      return -1;
    }
  }
  // Only the owner may connect. The directory (0700) already keeps others out; the socket's own mode
  // is narrowed right after bind (no process-wide umask: other threads may be creating files).
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    *error = errno_text(path);
    close(fd);
    return -1;
  }
  if (chmod(path.c_str(), 0600) != 0 || listen(fd, 64) != 0) {
    *error = errno_text(path);
    unlink(path.c_str());
    *error = errno_text(path);
    close(fd);
    return -1;
  }
  return fd;
}

int connect_to(const std::string& path, int seconds, std::string* error) {
  sockaddr_un addr;
  const int fd = new_socket(path, &addr, error);
  if (fd < 0) return -1;
  // Before connect: a Unix socket's connect waits for room in the listener's backlog up to the send
  // timeout.
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    *error = errno_text(path);
    close(fd);
    return -1;
  }
  return fd;
}

bool peer(int fd, pid_t* pid, uid_t* uid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) return false;
  *pid = cred.pid;
  *uid = cred.uid;
  return true;
}

bool peer_is_exporter(int fd, pid_t named, std::string* why) {
  pid_t pid = 0;
  uid_t uid = 0;
  if (!peer(fd, &pid, &uid)) {
    *why = "the socket's owner cannot be read (SO_PEERCRED)";
    return false;
  }
  // An unseen owner (pid 0) is taken on the socket's name only where its uid means this user: a uid
  // that another user namespace cannot map reads as the overflow uid, which may be this process's
  // own ("nobody").
  const bool unseen_ok = pid == 0 && uid != overflow_uid();
  if (named > 0 && uid == geteuid() && (pid == named || unseen_ok || innermost_pid(pid) == named)) return true;
  *why = "the socket's owner (pid " + std::to_string(pid) + ", uid " + std::to_string(uid) +
         ") is not the exporter of this user";
  return false;
}

bool send_all(int fd, const void* data, std::size_t n, Deadline deadline, int abort_fd) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t r = by_deadline(fd, POLLOUT, deadline, abort_fd,
                                  [&] { return send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT); });
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n, Deadline deadline, int abort_fd) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = by_deadline(fd, POLLIN, deadline, abort_fd, [&] { return recv(fd, p, n, MSG_DONTWAIT); });
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_fds(int fd, const std::vector<int>& fds, Deadline deadline, int abort_fd) {
  for (std::size_t at = 0; at < fds.size(); at += kFdsPerMessage) {
    const std::size_t n = std::min<std::size_t>(kFdsPerMessage, fds.size() - at);
    char byte = 'F';
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    std::memcpy(CMSG_DATA(c), fds.data() + at, sizeof(int) * n);
    const ssize_t r = by_deadline(fd, POLLOUT, deadline, abort_fd,
                                  [&] { return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT); });
    if (r != 1) return false;
  }
  return true;
}

bool recv_fds(int fd, std::size_t count, std::vector<int>* out, Deadline deadline) {
  const auto fail = [&] {
    for (int f : *out) close(f);
    out->clear();
    return false;
  };
  while (out->size() < count) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = by_deadline(fd, POLLIN, deadline, -1,
                                  [&] { return recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT); });
    if (r != 1) return fail();
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < n; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out->push_back(received);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || out->size() > count) return fail();
  }
  return true;
}

}  // namespace uvmpool::ipc
