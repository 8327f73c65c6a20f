// The exporting side of uvmpool's CUDA IPC (ipc.h): the table of exported allocations and the one
// server thread that hands their chunks to importers.
//
// Why frees are deferred: an importer maps the exporter's very chunks. If the program freed an
// allocation and the pool reused its chunks, the importer would see another allocation's data
// through its mapping. NVIDIA's driver keeps freed memory that is still open elsewhere out of use
// until the last importer closes it; so does uvmpool: each open handle is one connection the
// importer keeps until cuIpcCloseMemHandle (or its death), and the pool frees an allocation the
// program freed only when its last connection ends.
//
// A free on a stream (cuMemFreeAsync) is stream-ordered: the freeing stream's work may still use the
// memory. Taking such a free over, IPC records an event on the stream then; at the last close the
// server waits (without blocking: it checks the event each time round its loop) for that event before
// the pool frees the allocation, so it is never reused under work still running. A free on a
// capturing stream belongs to a graph that may run any number of times later: IPC does not take it
// over at all; the pool keeps such memory out of reuse for good (quarantine), which also keeps it
// valid for importers.
//
// The server never waits long on one importer: reading a request and sending a reply with its
// descriptors each have an overall deadline (kRequestDeadline), a connection that sends no request by
// then is dropped, connections are capped (kMaxConnections), and every wait also watches the exit
// signal.
//
// Process life: the thread starts on the first cuIpcGetMemHandle. A forked child forgets it all
// without touching it (its thread does not exist there) and closes its copies of the sockets. At
// exit, a handler (registered, under the same lock, before the thread starts) stops the thread,
// waiting for the driver call it may be in, and removes the socket.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <latch>
#include <vector>

#include "config/log.h"
#include "config/quiet_at_fork.h"
#include "driver/capture_mode.h"
#include "driver/context_scope.h"
#include "driver/real_driver.h"
#include "hooks/ipc.h"
#include "hooks/ipc_socket.h"
#include "pool/pool.h"
#include "stats/counters.h"

namespace uvmpool::ipc {
namespace {

struct Export {
  CUdeviceptr base = 0;
  std::uint64_t id = 0;  // the allocation's buffer id
  unsigned char secret[kSecretBytes] = {};
  CUipcMemHandle handle{};
  unsigned opens = 0;    // connections of importers that hold it open
  bool freed = false;    // the program freed it while open: the pool frees it at the last close
  CUevent event = nullptr;  // freed with cuMemFreeAsync: recorded on the freeing stream then
};

struct Connection {
  int fd = -1;
  std::uint64_t id = 0;  // 0: no request yet; else the allocation it holds open
  bool served = false;   // the open was sent whole (counted in ipc_opens_served)
  Deadline deadline{};   // without a request: dropped then
};

// An allocation whose last importer closed it after a cuMemFreeAsync: freed once `event` completes.
struct Waiting {
  std::uint64_t id = 0;  // the Export's, kept (freed, no opens) until the pool frees it
  CUevent event = nullptr;
};

constexpr std::chrono::milliseconds kRequestDeadline{2000};  // to read a request; to send the reply
constexpr std::size_t kMaxConnections = 4096;                 // past it new connections are refused
constexpr std::chrono::milliseconds kAcceptPause{100};        // no accept this long after EMFILE/ENFILE
constexpr int kWaitingPollMs = 10;                            // how often waiting frees are checked

struct State {
  std::mutex mu;  // everything below
  pool::Pool* pool = nullptr;
  std::unordered_map<std::uint64_t, Export> by_id;
  std::unordered_map<CUdeviceptr, std::uint64_t> by_base;
  int listen_fd = -1;
  int wake_fd = -1;
  std::string path;
  std::uint64_t token = 0;  // in the socket's name and every handle (ipc_handle.h)
  std::thread* thread = nullptr;  // leaked in a forked child, where it does not exist
  bool started = false;
  bool exiting = false;
};

State* g = new State;  // never destroyed: frees may come during exit
// A forked child's State, made without the heap: another thread of the parent may have held the
// allocator's lock at the fork, and an allocator that does not take it around fork (ASan's in GCC 12)
// would leave the child's malloc waiting for ever. (Suspected when ipc_fork_keeps_server first timed
// out under ASan; the timeouts went on until the background threads' work was kept out of forks,
// config/quiet_at_fork.h: the statistics publisher's first, then this server's start.)
alignas(State) unsigned char g_child_state[sizeof(State)];
std::atomic<std::size_t> g_exports{0};  // by_id.size(), so a free of a never-exported pointer takes no lock

bool same_secret(const unsigned char* a, const unsigned char* b) {
  unsigned char diff = 0;  // constant time: no early exit a prober could time
  for (std::size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Chunks [from, from + n) as POSIX descriptors (the caller closes them), or an error and none.
CUresult export_chunks(const pool::ChunkView& view, std::size_t from, std::size_t n, std::vector<int>* fds) {
  const driver::RealDriver* d = driver::real();
  if (d == nullptr || d->table.cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  for (std::size_t i = from; i < from + n; ++i) {
    const CUmemGenericAllocationHandle h = view.chunks[i];
    int fd = -1;
    const CUresult r = d->table.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      for (int f : *fds) close(f);
      fds->clear();
      return r;
    }
    fds->push_back(fd);
  }
  return CUDA_SUCCESS;
}

// The last importer closed allocation `id`, which the program had freed: its entry goes and the pool
// frees it, both under g->mu (the order serve takes too). Until then the entry says "freed", so a
// second free of the pointer is told as a double free and an export of it is refused: with the entry
// gone before the pool's free, a free or export in between saw memory the program had freed as live
// (a second free went through, and the deferred one then freed the next allocation at that address).
void free_by_pool_locked(std::uint64_t id) {
  auto it = g->by_id.find(id);
  if (it == g->by_id.end()) return;
  const CUdeviceptr p = it->second.base;
  g->by_base.erase(p);
  g->by_id.erase(it);
  g_exports.store(g->by_id.size(), std::memory_order_relaxed);
  CUresult r = CUDA_SUCCESS;
  g->pool->deallocate(p, &r);
  log::debug("CUDA IPC: {:#x} freed by the pool now that its last importer closed it ({})", p, static_cast<int>(r));
}

// The waiting frees whose event completed go to the pool (an event that fails is taken as done:
// its stream or context is gone, and with it the work).
void free_completed(std::vector<Waiting>* waiting) {
  if (waiting->empty()) return;
  const driver::RealDriver* d = driver::real();
  std::vector<Waiting> still;
  for (const Waiting& w : *waiting) {
    if (d->table.cuEventQuery(w.event) == CUDA_ERROR_NOT_READY) {
      still.push_back(w);
      continue;
    }
    d->table.cuEventDestroy_v2(w.event);
    std::lock_guard lock(g->mu);
    free_by_pool_locked(w.id);
  }
  waiting->swap(still);
}

// A connection ended (the importer closed the handle, or died): if it held an allocation the program
// has freed meanwhile and it was the last, the pool frees it now (or, after a cuMemFreeAsync, once
// the freeing stream's work is done: it joins *waiting, its entry kept until then).
void end_open(const Connection& c, std::vector<Waiting>* waiting) {
  {
    std::lock_guard lock(g->mu);
    auto it = g->by_id.find(c.id);
    if (it == g->by_id.end() || it->second.opens == 0) return;
    if (--it->second.opens != 0 || !it->second.freed) return;
    if (it->second.event == nullptr) {
      free_by_pool_locked(c.id);
      return;
    }
    waiting->push_back({c.id, it->second.event});
    it->second.event = nullptr;  // the waiting list's to destroy
  }
  free_completed(waiting);
}

void connection_ended(const Connection& c, std::vector<Waiting>* waiting) {
  close(c.fd);
  if (c.id == 0) return;
  end_open(c, waiting);
  // Counted once the close is dealt with: a reader who sees it sees the deferred free decided.
  if (c.served) stats::count_ipc_close();
}

// One request on a new connection. Returns false when the connection is to be closed.
bool serve(Connection& c) {
  // Closed before a byte was sent: another process of this pid probing whether the socket is live
  // (remove_stale_sockets), not an importer.
  char first = 0;
  if (recv(c.fd, &first, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    log::debug("CUDA IPC: a connection closed without a request (a liveness probe); dropped");
    return false;
  }
  Request req;
  if (!recv_all(c.fd, &req, sizeof req, std::chrono::steady_clock::now() + kRequestDeadline, g->wake_fd)) {
    log::warn("CUDA IPC: a request did not arrive whole within {} ms; connection dropped", kRequestDeadline.count());
    return false;
  }
  Reply reply;
  pool::ChunkView view;
  bool known = false;
  {
    std::lock_guard lock(g->mu);
    auto it = g->by_id.find(req.allocation);
    if (req.magic != kProtocolMagic || req.version != kProtocolVersion) {
      log::warn("CUDA IPC: a malformed request (not a uvmpool importer of this version); refused");
      reply.status = CUDA_ERROR_INVALID_VALUE;
    } else if (it == g->by_id.end() || !same_secret(it->second.secret, req.secret)) {
      // Unknown and wrong secrets get the same answer: the reply says nothing about which ids exist.
      log::warn("CUDA IPC: an open of allocation {} refused: no such exported allocation, or a wrong secret",
                req.allocation);
      reply.status = CUDA_ERROR_INVALID_VALUE;
    } else if (it->second.freed || g->exiting) {
      reply.status = CUDA_ERROR_INVALID_VALUE;  // as the driver: freed memory cannot be opened anew
    } else {
      auto v = g->pool->chunks_of(it->second.base);
      if (!v || v->info.buffer_id != req.allocation) {
        reply.status = CUDA_ERROR_INVALID_VALUE;
      } else {
        view = std::move(*v);
        ++it->second.opens;  // before anything can fail outside the lock: a free now is deferred
        c.id = req.allocation;
        known = true;
      }
    }
  }
  const Deadline deadline = std::chrono::steady_clock::now() + kRequestDeadline;
  // The descriptors go kFdsPerMessage at a time: each batch is exported, sent and closed before the
  // next, so an allocation of any size needs only that many descriptors here at once (a soft
  // RLIMIT_NOFILE of 1024 is common; 2 GiB is 1024 chunks of 2 MiB).
  std::vector<int> fds;
  if (known) reply.status = export_chunks(view, 0, std::min<std::size_t>(kFdsPerMessage, view.chunks.size()), &fds);
  if (reply.status == CUDA_SUCCESS) {
    reply.size = view.info.size;
    reply.offset = view.offset;
    reply.chunk_size = view.chunk_size;
    reply.chunks = static_cast<std::uint32_t>(view.chunks.size());
    reply.device = view.info.device;
  } else if (known) {
    log::warn("CUDA IPC: exporting allocation {}'s chunks failed ({}); the open is refused", c.id,
              static_cast<int>(reply.status));
  }
  bool sent = send_all(c.fd, &reply, sizeof reply, deadline, g->wake_fd);
  if (sent && reply.status == CUDA_SUCCESS)
    sent = send_all(c.fd, view.granules.data(), view.granules.size() * sizeof(std::uint32_t), deadline, g->wake_fd);
  for (std::size_t at = 0; sent && reply.status == CUDA_SUCCESS;) {
    // Each batch has its own deadline: the importer maps a batch before it reads the next.
    sent = send_fds(c.fd, fds, std::chrono::steady_clock::now() + kRequestDeadline, g->wake_fd);
    for (int f : fds) close(f);  // the importer has its own copies now
    fds.clear();
    at += kFdsPerMessage;
    if (at >= view.chunks.size()) break;
    const CUresult r = export_chunks(view, at, std::min<std::size_t>(kFdsPerMessage, view.chunks.size() - at), &fds);
    if (r != CUDA_SUCCESS) {
      log::warn("CUDA IPC: exporting allocation {}'s chunks failed ({}) after the reply; the open is undone", c.id,
                static_cast<int>(r));
      sent = false;
    }
  }
  for (int f : fds) close(f);
  if (reply.status != CUDA_SUCCESS || !sent) {
    if (reply.status == CUDA_SUCCESS) log::warn("CUDA IPC: sending allocation {}'s chunks failed; the open is undone", c.id);
    return false;  // connection_ended undoes the open (c.id set only if counted)
  }
  c.served = true;
  stats::count_ipc_open();
  return true;
}

// The server has stopped for good (poll failed): the next cuIpcGetMemHandle starts a new one.
// Importers' connections are closed; their allocations stay as they are (a deferred free stays
// deferred: leaked rather than reused under a mapping).
void server_died(std::vector<Connection>* conns) {
  for (const Connection& c : *conns) close(c.fd);
  conns->clear();
  std::lock_guard lock(g->mu);
  if (g->exiting) return;  // stop_at_exit joins the thread and cleans up
  unlink(g->path.c_str());
  close(g->listen_fd);
  close(g->wake_fd);
  g->listen_fd = g->wake_fd = -1;
  g->thread->detach();
  delete g->thread;
  g->thread = nullptr;
  g->started = false;
}

// What one round of the server loop does with one connection whose socket is ready (or expired).
bool keep_connection(Connection& c, short ev, Deadline now) {
  if (ev == 0) {
    if (c.id != 0 || now < c.deadline) return true;
    log::warn("CUDA IPC: a connection sent no request within {} ms; dropped", kRequestDeadline.count());
    return false;
  }
  // A request (on a new connection) is served; anything else (closed, a second message, which
  // importers never send, or an error) ends it.
  return c.id == 0 && (ev & POLLIN) != 0 && serve(c);
}

void accept_one(std::vector<Connection>* conns, Deadline* accept_paused_until) {
  const int fd = accept4(g->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE) {
      // The connection stays in the backlog; polling the socket again at once would spin.
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true)) log::warn("CUDA IPC: out of file descriptors accepting an importer; retrying shortly");
      *accept_paused_until = std::chrono::steady_clock::now() + kAcceptPause;
    }
    return;
  }
  if (conns->size() >= kMaxConnections) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      log::warn("CUDA IPC: {} importer connections already open; further ones are refused", kMaxConnections);
    }
    close(fd);
    return;
  }
  pid_t pid = 0;
  uid_t uid = 0;
  if (!peer(fd, &pid, &uid) || uid != geteuid()) {
    log::warn("CUDA IPC: a connection from uid {} (pid {}) refused: only processes of this user may open its memory",
              uid, pid);
    close(fd);
    return;
  }
  conns->push_back({.fd = fd, .deadline = std::chrono::steady_clock::now() + kRequestDeadline});
}

void run_server(std::latch* quiet_taken) {
  // A fork waits while the server works, and comes in while it waits for its sockets
  // (config/quiet_at_fork.h): its work allocates.
  const config::QuietAtFork quiet;
  quiet_taken->count_down();  // the starter waits for this: see start_locked
  // Its frees' event queries must not spoil a program's graph capture.
  if (const driver::RealDriver* real = driver::real()) driver::relax_capture_mode(real->table);
  std::vector<Connection> conns;
  std::vector<Waiting> waiting;
  Deadline accept_paused_until{};
  for (;;) {
    const Deadline now = std::chrono::steady_clock::now();
    const bool accepting = now >= accept_paused_until;
    std::vector<pollfd> fds;
    fds.push_back({g->wake_fd, POLLIN, 0});
    fds.push_back({accepting ? g->listen_fd : -1, POLLIN, 0});
    Deadline next = Deadline::max();
    for (const Connection& c : conns) {
      fds.push_back({c.fd, POLLIN, 0});
      if (c.id == 0) next = std::min(next, c.deadline);
    }
    if (!accepting) next = std::min(next, accept_paused_until);
    int timeout = -1;
    if (next != Deadline::max()) {
      timeout = static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
    }
    if (!waiting.empty()) timeout = timeout < 0 ? kWaitingPollMs : std::min(timeout, kWaitingPollMs);
    int ready = 0;
    {
      const config::ForkMayLandHere waiting_for_sockets;
      ready = poll(fds.data(), fds.size(), timeout);
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      log::error("CUDA IPC: the server stops: poll failed (errno {}); the next cuIpcGetMemHandle starts it again",
                 errno);
      server_died(&conns);
      return;
    }
    if (fds[0].revents != 0) break;  // exit
    // An exception (out of memory) drops the connection it came from, not the process.
    const auto guarded = [](const char* what, auto&& work) {
      try {
        return work();
      } catch (const std::exception& e) {
        log::error("CUDA IPC: {} failed: {}; the connection is dropped", what, e.what());
      } catch (...) {
        log::error("CUDA IPC: {} failed (an exception); the connection is dropped", what);
      }
      return false;
    };
    const Deadline after = std::chrono::steady_clock::now();
    std::vector<Connection> keep;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      if (guarded("serving an importer", [&] { return keep_connection(c, fds[i + 2].revents, after); })) {
        keep.push_back(c);
      } else {
        guarded("ending a connection", [&] {
          connection_ended(c, &waiting);
          return true;
        });
      }
    }
    conns.swap(keep);
    guarded("freeing memory its importers closed", [&] {
      free_completed(&waiting);
      return true;
    });
    if (accepting && (fds[1].revents & POLLIN) != 0) {
      guarded("accepting an importer", [&] {
        accept_one(&conns, &accept_paused_until);
        return true;
      });
    }
  }
  for (const Connection& c : conns) close(c.fd);  // exiting: importers keep what they mapped
}

void stop_at_exit() {
  std::lock_guard start_lock(g->mu);  // no start after this, none half-done during it
  g->exiting = true;
  if (!g->started) return;
  const std::uint64_t one = 1;
  if (write(g->wake_fd, &one, sizeof one) < 0) {}
  std::thread* t = g->thread;
  g->mu.unlock();  // the thread may need the lock to finish what it is doing
  t->join();
  g->mu.lock();
  unlink(g->path.c_str());
  close(g->listen_fd);
}

void forget_in_child() {
  // The child's pool is a new one and its pid another: nothing exported here is its own. Its copies
  // of the sockets are closed so that importers still see the parent's end alone.
  State* old = g;
  if (old->listen_fd >= 0) close(old->listen_fd);
  if (old->wake_fd >= 0) close(old->wake_fd);
  g = new (g_child_state) State;  // the old one is leaked (its mutex may be held, its thread is not here);
                                  // a grandchild reuses the storage, read above
  g_exports.store(0, std::memory_order_relaxed);
}

// Under g->mu. Starts the server; false (and a log line) if it cannot.
bool start_locked(pool::Pool& pool) {
  if (g->started) return true;
  if (g->exiting) return false;
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit(stop_at_exit);
    config::at_fork(nullptr, nullptr, forget_in_child);
  });
  // The socket's name: the pid and a token, since another process of this pid (in another pid
  // namespace sharing /dev/shm) may be serving at the name of the pid alone, or with its own token.
  std::uint64_t token = 0;
  while (token == 0) {
    if (getrandom(&token, sizeof token, 0) != static_cast<ssize_t>(sizeof token)) {
      log::error("CUDA IPC: no random bytes for the socket's name (errno {}); cuIpcGetMemHandle of pool memory fails", errno);
      return false;
    }
  }
  if (const int removed = remove_stale_sockets(getpid()); removed > 0)
    log::debug("CUDA IPC: removed {} socket(s) of an earlier process of this pid", removed);
  std::string error;
  const std::string path = socket_path(getpid(), token, &error);
  const int fd = path.empty() ? -1 : listen_at(path, &error);
  if (fd < 0) {
    log::error("CUDA IPC: cannot listen for importers ({}); cuIpcGetMemHandle of pool memory fails", error);
    return false;
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    unlink(path.c_str());
    return false;
  }
  g->pool = &pool;
  g->listen_fd = fd;
  g->wake_fd = wake;
  g->path = path;
  g->token = token;
  try {
    // The starter returns only once the thread holds the fork lock: a thread's start allocates
    // (under ASan, the sanitizer's own bookkeeping), and a program that forks right after its
    // first export (ipc_fork_keeps_server) must not fork into it.
    std::latch quiet_taken(1);
    g->thread = new std::thread(run_server, &quiet_taken);
    quiet_taken.wait();
  } catch (const std::exception& e) {
    log::error("CUDA IPC: cannot start the server thread ({}); cuIpcGetMemHandle of pool memory fails", e.what());
    close(fd);
    close(wake);
    unlink(path.c_str());
    g->listen_fd = g->wake_fd = -1;
    return false;
  }
  g->started = true;
  log::debug("CUDA IPC: serving exported pool memory at {}", path);
  return true;
}

}  // namespace

CUresult export_handle(pool::Pool& pool, CUdeviceptr p, CUipcMemHandle* out) {
  const std::optional<pool::ChunkView> view = pool.chunks_of(p);
  if (!view) return CUDA_ERROR_INVALID_VALUE;
  if (!view->exportable) {
    log::error("cuIpcGetMemHandle({:#x}): the allocation lies {} that the driver cannot export; not shared",
               p, view->host_chunks ? "partly in host memory (spilled)" : "in chunks");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard lock(g->mu);
  if (!start_locked(pool)) return CUDA_ERROR_OPERATING_SYSTEM;
  const std::uint64_t id = view->info.buffer_id;
  if (auto it = g->by_id.find(id); it != g->by_id.end()) {
    if (it->second.freed) {
      log::error("cuIpcGetMemHandle({:#x}): the allocation was freed (it lives on only while another process has it "
                 "open); refused", p);
      return CUDA_ERROR_INVALID_VALUE;  // as the driver: freed memory cannot be exported
    }
    *out = it->second.handle;  // the same handle each time, as the driver's
    return CUDA_SUCCESS;
  }
  Export e;
  e.base = view->info.base;
  e.id = id;
  if (getrandom(e.secret, sizeof e.secret, 0) != static_cast<ssize_t>(sizeof e.secret)) {
    log::error("cuIpcGetMemHandle: no random bytes for the handle's secret (errno {})", errno);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  HandleData d;
  d.pid = static_cast<std::uint32_t>(getpid());
  d.token = g->token;
  d.device = view->info.device;
  d.allocation = id;
  d.size = view->info.size;
  std::memcpy(d.secret, e.secret, sizeof d.secret);
  e.handle = encode(d);
  *out = e.handle;
  // A base still in the table belongs to an allocation freed with no importer: its entry went then.
  g->by_id.emplace(id, e);  // first: if the second insertion throws, by_base names no missing id
  g->by_base[e.base] = id;
  g_exports.store(g->by_id.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

bool exporting() { return g_exports.load(std::memory_order_relaxed) != 0; }

bool exported_here(const HandleData& h) {
  if (h.pid != static_cast<std::uint32_t>(getpid())) return false;
  std::lock_guard lock(g->mu);
  return g->started && h.token == g->token;
}

bool take_free(CUdeviceptr p, CUresult* result, const AsyncFree* async) {
  if (g_exports.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(g->mu);
  auto base = g->by_base.find(p);
  if (base == g->by_base.end()) return false;
  auto it = g->by_id.find(base->second);
  if (it == g->by_id.end()) {  // cannot happen (both change under the lock); forget the stray entry
    g->by_base.erase(base);
    return false;
  }
  if (it->second.freed) {
    log::error("free of {:#x}: already freed (double free of memory another process still has open); ignored", p);
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  if (it->second.opens > 0 && (async == nullptr || !async->capturing)) {
    if (async != nullptr) {
      // The freeing stream's work may still use the memory: the pool frees it only once this event
      // (recorded behind that work) has completed, after the last close.
      // The event is made in the stream's context: the driver records none of another context's.
      const driver::Table& d = driver::real()->table;
      CUcontext context = nullptr;
      driver::stream_context(d, async->stream, &context);  // none: the current context, as before
      const driver::ContextScope in(d, context);
      CUevent event = nullptr;
      if (d.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
          d.cuEventRecord(event, async->stream) != CUDA_SUCCESS) {
        if (event != nullptr) d.cuEventDestroy_v2(event);
        event = nullptr;
        log::warn("free of {:#x} on stream {}: no event for its work; waiting for the stream now", p,
                  static_cast<void*>(async->stream));
        if (const CUresult r = d.cuStreamSynchronize(async->stream); r != CUDA_SUCCESS) {
          *result = r;
          return true;  // not freed: the program sees the stream's error
        }
      }
      it->second.event = event;
    }
    it->second.freed = true;
    log::debug("free of {:#x}: still open in {} importer(s); freed when they close it", p, it->second.opens);
    *result = CUDA_SUCCESS;
    return true;
  }
  // Not open anywhere, or freed inside a graph capture: the pool frees it as usual (a capture's free
  // is never reused, so importers' mappings stay valid); its handle opens nothing any more.
  g->by_id.erase(it);
  g->by_base.erase(base);
  g_exports.store(g->by_id.size(), std::memory_order_relaxed);
  return false;
}

}  // namespace uvmpool::ipc
