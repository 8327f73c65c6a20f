// The Unix socket of uvmpool's CUDA IPC: where it lives, who may talk on it, and descriptors over it.
// The socket is /dev/shm/uvmpool-<uid>/ipc-<pid> (the user's directory of statistics segments: mode
// 0700, owner checked), and both ends check SO_PEERCRED: same effective uid, and the exporter's pid
// is the one the handle names.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace uvmpool::ipc {

// The socket path of process `pid` of this user; "" (and why in *error) when the user's directory
// is not safe to use.
std::string socket_path(pid_t pid, std::string* error);

// A listening socket bound at `path` (a stale one of a dead process of the same pid is replaced),
// or -1 and *error.
int listen_at(const std::string& path, std::string* error);
// A socket connected to `path`, or -1 and *error.
int connect_to(const std::string& path, std::string* error);

// The peer's credentials; false if they cannot be read.
bool peer(int fd, pid_t* pid, uid_t* uid);

// Exactly n bytes, or false (closed, error, timeout). MSG_NOSIGNAL: a vanished peer is an error,
// not a SIGPIPE.
bool send_all(int fd, const void* data, std::size_t n);
bool recv_all(int fd, void* data, std::size_t n);

// Sends descriptors, kFdsPerMessage a message (each with one byte). The caller still owns them.
bool send_fds(int fd, const std::vector<int>& fds);
// Receives exactly `count` descriptors into *out (closed again on failure).
bool recv_fds(int fd, std::size_t count, std::vector<int>* out);

// Bounds a blocked send or receive on `fd`, so a stuck peer cannot hang a thread forever.
void set_timeouts(int fd, int seconds);

}  // namespace uvmpool::ipc
