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
// Process life: the thread starts on the first cuIpcGetMemHandle. A forked child forgets it all
// without touching it (its thread does not exist there) and closes its copies of the sockets. At
// exit, a handler (registered, under the same lock, before the thread starts) stops the thread,
// waiting for the driver call it may be in, and removes the socket.
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/log.h"
#include "driver/real_driver.h"
#include "hooks/ipc.h"
#include "hooks/ipc_socket.h"
#include "pool/pool.h"

namespace uvmpool::ipc {
namespace {

struct Export {
  CUdeviceptr base = 0;
  std::uint64_t id = 0;  // the allocation's buffer id
  unsigned char secret[kSecretBytes] = {};
  CUipcMemHandle handle{};
  unsigned opens = 0;    // connections of importers that hold it open
  bool freed = false;    // the program freed it while open: the pool frees it at the last close
};

struct Connection {
  int fd = -1;
  std::uint64_t id = 0;  // 0: no request yet; else the allocation it holds open
};

struct State {
  std::mutex mu;  // everything below
  pool::Pool* pool = nullptr;
  std::unordered_map<std::uint64_t, Export> by_id;
  std::unordered_map<CUdeviceptr, std::uint64_t> by_base;
  int listen_fd = -1;
  int wake_fd = -1;
  std::string path;
  std::thread* thread = nullptr;  // leaked in a forked child, where it does not exist
  bool started = false;
  bool exiting = false;
};

State* g = new State;  // never destroyed: frees may come during exit
std::atomic<std::size_t> g_exports{0};  // by_id.size(), so a free of a never-exported pointer takes no lock

bool same_secret(const unsigned char* a, const unsigned char* b) {
  unsigned char diff = 0;  // constant time: no early exit a prober could time
  for (std::size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The exported chunks as POSIX descriptors (the caller closes them), or an error and none.
CUresult export_chunks(const pool::ChunkView& view, std::vector<int>* fds) {
  const driver::RealDriver* d = driver::real();
  if (d == nullptr || d->table.cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  for (CUmemGenericAllocationHandle h : view.chunks) {
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

// A connection ended (the importer closed the handle, or died): if it held an allocation the program
// has freed meanwhile and it was the last, the pool frees it now.
void connection_ended(const Connection& c) {
  close(c.fd);
  if (c.id == 0) return;
  CUdeviceptr free_now = 0;
  pool::Pool* pool = nullptr;
  {
    std::lock_guard lock(g->mu);
    auto it = g->by_id.find(c.id);
    if (it == g->by_id.end() || it->second.opens == 0) return;
    if (--it->second.opens == 0 && it->second.freed) {
      free_now = it->second.base;
      pool = g->pool;
      g->by_base.erase(free_now);
      g->by_id.erase(it);
      g_exports.store(g->by_id.size(), std::memory_order_relaxed);
    }
  }
  if (free_now != 0) {
    CUresult r = CUDA_SUCCESS;
    pool->deallocate(free_now, &r);
    log::debug("CUDA IPC: {:#x} freed by the pool now that its last importer closed it ({})", free_now, static_cast<int>(r));
  }
}

// One request on a new connection. Returns false when the connection is to be closed.
bool serve(Connection& c) {
  Request req;
  if (!recv_all(c.fd, &req, sizeof req)) return false;
  Reply reply;
  pool::ChunkView view;
  bool known = false;
  {
    std::lock_guard lock(g->mu);
    auto it = g->by_id.find(req.allocation);
    if (req.magic != kProtocolMagic || req.version != 1) {
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
  std::vector<int> fds;
  if (known) reply.status = export_chunks(view, &fds);
  if (reply.status == CUDA_SUCCESS) {
    reply.size = view.info.size;
    reply.offset = view.offset;
    reply.chunk_size = view.chunk_size;
    reply.chunks = static_cast<std::uint32_t>(view.chunks.size());
    reply.device = view.info.device;
  }
  const bool sent = send_all(c.fd, &reply, sizeof reply) && (reply.status != CUDA_SUCCESS || send_fds(c.fd, fds));
  for (int f : fds) close(f);  // the importer has its own copies now
  if (reply.status != CUDA_SUCCESS || !sent) {
    if (reply.status == CUDA_SUCCESS) log::warn("CUDA IPC: sending allocation {}'s chunks failed; the open is undone", c.id);
    return false;  // connection_ended undoes the open (c.id set only if counted)
  }
  return true;
}

void run_server() {
  std::vector<Connection> conns;
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({g->wake_fd, POLLIN, 0});
    fds.push_back({g->listen_fd, POLLIN, 0});
    for (const Connection& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log::error("CUDA IPC: the server stops: poll failed (errno {})", errno);
      break;
    }
    if (fds[0].revents != 0) break;  // exit
    std::vector<Connection> keep;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0) {
        keep.push_back(c);
      } else if (c.id == 0 && (ev & POLLIN) != 0 && serve(c)) {
        keep.push_back(c);  // now holding its allocation open
      } else {
        connection_ended(c);  // closed, a second message (never sent by importers), or an error
      }
    }
    conns.swap(keep);
    if ((fds[1].revents & POLLIN) != 0) {
      const int fd = accept4(g->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      pid_t pid = 0;
      uid_t uid = 0;
      if (!peer(fd, &pid, &uid) || uid != geteuid()) {
        log::warn("CUDA IPC: a connection from uid {} (pid {}) refused: only processes of this user may open its memory",
                  uid, pid);
        close(fd);
        continue;
      }
      set_timeouts(fd, 10);
      conns.push_back({fd, 0});
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
  g = new State;  // the old one is leaked: its mutex may be held, its thread is not here
  g_exports.store(0, std::memory_order_relaxed);
}

// Under g->mu. Starts the server; false (and a log line) if it cannot.
bool start_locked(pool::Pool& pool) {
  if (g->started) return true;
  if (g->exiting) return false;
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit(stop_at_exit);
    pthread_atfork(nullptr, nullptr, forget_in_child);
  });
  std::string error;
  const std::string path = socket_path(getpid(), &error);
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
  g->thread = new std::thread(run_server);
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
  d.device = view->info.device;
  d.allocation = id;
  d.size = view->info.size;
  std::memcpy(d.secret, e.secret, sizeof d.secret);
  e.handle = encode(d);
  *out = e.handle;
  // A base still in the table belongs to an allocation freed with no importer: its entry went then.
  g->by_base[e.base] = id;
  g->by_id.emplace(id, e);
  g_exports.store(g->by_id.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

bool take_free(CUdeviceptr p, CUresult* result) {
  if (g_exports.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(g->mu);
  auto base = g->by_base.find(p);
  if (base == g->by_base.end()) return false;
  auto it = g->by_id.find(base->second);
  if (it->second.freed) {
    log::error("free of {:#x}: already freed (double free of memory another process still has open); ignored", p);
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  if (it->second.opens > 0) {
    it->second.freed = true;
    log::debug("free of {:#x}: still open in {} importer(s); freed when they close it", p, it->second.opens);
    *result = CUDA_SUCCESS;
    return true;
  }
  g->by_id.erase(it);  // its handle opens nothing any more
  g->by_base.erase(base);
  g_exports.store(g->by_id.size(), std::memory_order_relaxed);
  return false;
}

}  // namespace uvmpool::ipc
