// The importing side of uvmpool's CUDA IPC (ipc.h): cuIpcOpenMemHandle of a uvmpool handle asks the
// exporter for its chunks' descriptors, imports them as handles of its own and maps them into one
// new range with read-write access for the current device; cuIpcCloseMemHandle unmaps it.
//
// The imported handles are released as soon as they are mapped: the mapping keeps the memory, so
// it stays valid here until closed, whatever the exporter does meanwhile (frees it, exits), as with
// the driver's own IPC. The connection to the exporter stays open until close: while it is open the
// exporter's pool does not reuse the chunks (ipc_export.cpp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "config/log.h"
#include "config/quiet_at_fork.h"
#include "driver/real_driver.h"
#include "hooks/ipc.h"
#include "hooks/ipc_socket.h"
#include "pool/peer_access.h"

namespace uvmpool::ipc {
namespace {

struct Import {
  CUdeviceptr range = 0;  // the mapping of the chunks
  std::size_t chunk_size = 0;
  std::size_t chunks = 0;               // handles mapped one after another: pieces of granules[i] chunks
  std::vector<std::uint32_t> granules;
  std::size_t bytes = 0;                // of the reserved range: all the pieces
  int connection = -1;
};

struct Imports {
  std::mutex mu;
  std::map<CUdeviceptr, Import> by_address;  // by the address handed out
  std::set<int> opening;                     // connections of opens in progress
};
Imports* g = new Imports;  // never destroyed
// A forked child's table, made without the heap (as ipc_export.cpp's State: malloc after a fork can wait
// for ever for a lock another thread of the parent held).
alignas(Imports) unsigned char g_child_imports[sizeof(Imports)];

// fork holds the lock across itself, so the child sees the table whole (not half-changed by another
// thread's open or close).
void lock_for_fork() { g->mu.lock(); }
void unlock_after_fork() { g->mu.unlock(); }

void forget_in_child() {
  // The child cannot use the parent's mappings (its CUDA state is unusable); it only closes its
  // copies of the connections (opens in progress included), so the exporter sees the parent's alone.
  for (const auto& [address, import] : g->by_address) close(import.connection);
  for (int fd : g->opening) close(fd);
  g = new (g_child_imports) Imports;  // the old one is leaked: its mutex is held by the thread that forked
}

void unmap(const driver::Table& d, const Import& im, std::size_t mapped) {
  pool::PeerAccess::get().forget(im.range, im.bytes);
  std::size_t at = 0;
  for (std::size_t i = 0; i < mapped; ++i) {
    d.cuMemUnmap(im.range + at, im.granules[i] * im.chunk_size);
    at += im.granules[i] * im.chunk_size;
  }
  d.cuMemAddressFree(im.range, im.bytes);
}

// Receives the chunks' descriptors kFdsPerMessage at a time, importing and mapping each batch and
// closing its descriptors before the next (so an allocation of any size needs only one batch of
// descriptors at once), then gives access; all or nothing.
CUresult map_chunks(const driver::Table& d, int connection, Deadline deadline, Import* im) {
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (const CUresult r = d.cuCtxGetDevice(&device); r != CUDA_SUCCESS) return r;
  const std::size_t bytes = im->bytes;
  if (const CUresult r = d.cuMemAddressReserve(&im->range, bytes, im->chunk_size, 0, 0); r != CUDA_SUCCESS) return r;
  std::size_t mapped = 0, at = 0;
  CUresult r = CUDA_SUCCESS;
  while (mapped < im->chunks && r == CUDA_SUCCESS) {
    std::vector<int> fds;
    if (!recv_fds(connection, std::min<std::size_t>(kFdsPerMessage, im->chunks - mapped), &fds, deadline)) {
      log::error("cuIpcOpenMemHandle: the exporter's chunks did not arrive ({} of {} came)", mapped, im->chunks);
      r = CUDA_ERROR_INVALID_VALUE;
      break;
    }
    for (int fd : fds) {
      CUmemGenericAllocationHandle h = 0;
      if (r == CUDA_SUCCESS) {
        r = d.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      }
      if (r == CUDA_SUCCESS) {
        const std::size_t piece = im->granules[mapped] * im->chunk_size;
        r = d.cuMemMap(im->range + at, piece, 0, h, 0);
        d.cuMemRelease(h);  // mapped or not, the handle goes: a mapping keeps its memory
        if (r == CUDA_SUCCESS) {
          ++mapped;
          at += piece;
        }
      }
      close(fd);
    }
  }
  // Access for this device and the devices the program gave peer access to it (pool/peer_access.h).
  if (r == CUDA_SUCCESS) r = pool::PeerAccess::get().grant(d, device, im->range, bytes);
  if (r != CUDA_SUCCESS) unmap(d, *im, mapped);
  return r;
}

CUresult refuse(const HandleData& h, const std::string& why, CUresult r = CUDA_ERROR_INVALID_VALUE) {
  log::error("cuIpcOpenMemHandle of allocation {} of process {}: {}", h.allocation, h.pid, why);
  return r;
}

}  // namespace

CUresult open_handle(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags) {
  static std::once_flag registered;
  std::call_once(registered, [] { config::at_fork(lock_for_fork, unlock_after_fork, forget_in_child); });
  const HandleData h = decode(handle);
  if ((flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (exported_here(h)) {
    return refuse(h, "it was exported by this process (the driver refuses that too)", CUDA_ERROR_INVALID_CONTEXT);
  }
  const driver::RealDriver* real = driver::real();
  if (real == nullptr || real->table.cuMemImportFromShareableHandle == nullptr) return CUDA_ERROR_NO_DEVICE;
  const driver::Table& d = real->table;
  std::string error;
  const std::string path = socket_path(static_cast<pid_t>(h.pid), h.token, &error);
  // A stopped or stuck exporter cannot hang the open: connecting, and then the whole exchange, are
  // bounded.
  constexpr int kTimeoutSeconds = 30;
  const int fd = path.empty() ? -1 : connect_to(path, kTimeoutSeconds, &error);
  if (fd < 0) return refuse(h, "cannot reach the exporter (it exited, is stopped, or is not a uvmpool process of this user): " + error);
  {
    std::lock_guard lock(g->mu);
    g->opening.insert(fd);  // a fork from now on closes the child's copy
  }
  const auto forget_opening = [&] {
    std::lock_guard lock(g->mu);
    g->opening.erase(fd);
  };
  const auto fail = [&](const std::string& why, CUresult r = CUDA_ERROR_INVALID_VALUE) {
    forget_opening();
    close(fd);
    return refuse(h, why, r);
  };
  if (std::string why; !peer_is_exporter(fd, static_cast<pid_t>(h.pid), &why)) return fail(why);
  const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
  Request req;
  req.allocation = h.allocation;
  std::memcpy(req.secret, h.secret, sizeof req.secret);
  Reply reply;
  if (!send_all(fd, &req, sizeof req, deadline) || !recv_all(fd, &reply, sizeof reply, deadline) ||
      reply.magic != kProtocolMagic) {
    return fail("the exporter did not answer");
  }
  if (reply.status != CUDA_SUCCESS) {
    return fail("the exporter refused it (freed, never exported, or a wrong secret): error " +
                std::to_string(reply.status), static_cast<CUresult>(reply.status));
  }
  const bool power_of_two = reply.chunk_size != 0 && (reply.chunk_size & (reply.chunk_size - 1)) == 0;
  if (reply.chunks == 0 || reply.chunks > kMaxChunks || !power_of_two || reply.chunk_size > (std::uint64_t{1} << 40)) {
    return fail("the exporter's answer does not describe memory (refused)");
  }
  Import im;
  im.granules.resize(reply.chunks);
  if (!recv_all(fd, im.granules.data(), im.granules.size() * sizeof(std::uint32_t), deadline)) {
    return fail("the exporter's piece sizes did not arrive");
  }
  std::uint64_t granules = 0;
  for (const std::uint32_t g : im.granules) granules += g == 0 ? kMaxChunks + std::uint64_t{1} : g;
  if (granules > kMaxChunks || reply.offset >= granules * reply.chunk_size ||
      reply.size > granules * reply.chunk_size - reply.offset) {
    return fail("the exporter's answer does not describe memory (refused)");
  }
  im.chunk_size = reply.chunk_size;
  im.chunks = reply.chunks;
  im.bytes = granules * reply.chunk_size;
  im.connection = fd;
  const CUresult r = map_chunks(d, fd, deadline, &im);
  if (r != CUDA_SUCCESS) return fail("receiving, importing or mapping its chunks failed", r);
  *out = im.range + reply.offset;
  std::lock_guard lock(g->mu);
  g->opening.erase(fd);
  g->by_address[*out] = im;
  log::debug("CUDA IPC: opened allocation {} of process {} ({} bytes, {} chunks) at {:#x}", h.allocation, h.pid,
             reply.size, reply.chunks, *out);
  return CUDA_SUCCESS;
}

bool close_handle(CUdeviceptr p, CUresult* result) {
  Import im;
  {
    std::lock_guard lock(g->mu);
    auto it = g->by_address.find(p);
    if (it == g->by_address.end()) return false;
    im = it->second;
    g->by_address.erase(it);
  }
  const driver::RealDriver* real = driver::real();
  if (real != nullptr) unmap(real->table, im, im.chunks);
  close(im.connection);  // tells the exporter: its pool may now reuse the memory if it was freed
  *result = CUDA_SUCCESS;
  return true;
}

}  // namespace uvmpool::ipc
