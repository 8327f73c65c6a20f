// The Unix socket of uvmpool's CUDA IPC: where it lives, who may talk on it, and descriptors over it.
// The socket is /dev/shm/uvmpool-<uid>/ipc-<pid>-<token> (the user's directory of statistics
// segments: mode 0700, owner checked; the token a random number the exporter drew, which the handle
// carries, since a pid names a process only within its pid namespace), and both ends check
// SO_PEERCRED: same effective uid, and the exporter is the process the handle names
// (peer_is_exporter: across pid namespaces too, as containers sharing /dev/shm run).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace uvmpool::ipc {

// The socket path of process `pid` of this user with `token` (0: the name without one, of uvmpool
// before tokens); "" (and why in *error) when the user's directory is not safe to use.
std::string socket_path(pid_t pid, std::uint64_t token, std::string* error);

// Removes the sockets named for `pid` in the user's directory that nothing listens on any more (left
// by a killed process of that pid); a live one, of a process of the same pid in another pid
// namespace, stays. Returns how many went.
int remove_stale_sockets(pid_t pid);

// A listening socket bound at `path` (a stale one is replaced), or -1 and *error.
int listen_at(const std::string& path, std::string* error);
// A socket connected to `path`, or -1 and *error. Gives up after `seconds` (a listener whose backlog
// is full, because its process is stopped, would block connect forever).
int connect_to(const std::string& path, int seconds, std::string* error);

// The peer's credentials; false if they cannot be read.
bool peer(int fd, pid_t* pid, uid_t* uid);

// Whether the peer of `fd` may be the exporter a handle names: a process of this effective uid whose
// pid in its own pid namespace is `named` (the pid it wrote into the handle, > 0). From here it is
// seen as
//   - `named` itself, in this pid namespace;
//   - another pid whose innermost pid is `named` (the last of /proc/<pid>/status's NStgid): an
//     exporter in a pid namespace below this one, a container's seen from the host;
//   - pid 0, from a pid namespace this one cannot see (another container's, both sharing /dev/shm),
//     unless its uid is the overflow uid (another user namespace's unmapped user).
// This keeps other users out, not this user's other processes: the socket's name (the handle's pid
// and token) lies in this user's own directory (mode 0700), which only this user can list or bind
// in. Containers that share /dev/shm and run as one uid (root, often) are one user here. Else false,
// and *why names the peer as seen from here.
bool peer_is_exporter(int fd, pid_t named, std::string* why);

// Every transfer below finishes by `deadline` or fails: an overall bound, whatever pace the peer
// keeps (a byte every few seconds cannot stretch it). It also fails as soon as `abort_fd` (if not -1)
// becomes readable (the exporter's exit). MSG_NOSIGNAL: a vanished peer is an error, not a SIGPIPE.
using Deadline = std::chrono::steady_clock::time_point;

// Exactly n bytes, or false (closed, error, deadline, abort).
bool send_all(int fd, const void* data, std::size_t n, Deadline deadline, int abort_fd = -1);
bool recv_all(int fd, void* data, std::size_t n, Deadline deadline, int abort_fd = -1);

// Sends descriptors, kFdsPerMessage a message (each with one byte). The caller still owns them.
bool send_fds(int fd, const std::vector<int>& fds, Deadline deadline, int abort_fd = -1);
// Receives exactly `count` descriptors into *out (closed again on failure); count <= kFdsPerMessage
// keeps it to one message.
bool recv_fds(int fd, std::size_t count, std::vector<int>* out, Deadline deadline);

}  // namespace uvmpool::ipc
