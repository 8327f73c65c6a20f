// The importing side of uvmpool's CUDA IPC (ipc.h): cuIpcOpenMemHandle of a uvmpool handle asks the
// exporter for its chunks' descriptors, imports them as handles of its own and maps them into one
// new range with read-write access for the current device; cuIpcCloseMemHandle unmaps it.
//
// The imported handles are released as soon as they are mapped: the mapping keeps the memory, so
// it stays valid here until closed, whatever the exporter does meanwhile (frees it, exits), as with
// the driver's own IPC. The connection to the exporter stays open until close: while it is open the
// exporter's pool does not reuse the chunks (ipc_export.cpp).
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "config/log.h"
#include "driver/real_driver.h"
#include "hooks/ipc.h"
#include "hooks/ipc_socket.h"

namespace uvmpool::ipc {
namespace {

struct Import {
  CUdeviceptr range = 0;  // the mapping of the chunks
  std::size_t chunk_size = 0;
  std::size_t chunks = 0;
  int connection = -1;
};

struct Imports {
  std::mutex mu;
  std::map<CUdeviceptr, Import> by_address;  // by the address handed out
};
Imports* g = new Imports;  // never destroyed

void forget_in_child() {
  // The child cannot use the parent's mappings (its CUDA state is unusable); it only closes its
  // copies of the connections, so the exporter sees the parent's close alone.
  for (const auto& [address, import] : g->by_address) close(import.connection);
  g = new Imports;  // the old one is leaked: its mutex may be held
}

void unmap(const driver::Table& d, const Import& im, std::size_t mapped) {
  for (std::size_t i = 0; i < mapped; ++i) d.cuMemUnmap(im.range + i * im.chunk_size, im.chunk_size);
  d.cuMemAddressFree(im.range, im.chunks * im.chunk_size);
}

// Imports, maps and gives access; all or nothing.
CUresult map_chunks(const driver::Table& d, const std::vector<int>& fds, Import* im) {
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (const CUresult r = d.cuCtxGetDevice(&device); r != CUDA_SUCCESS) return r;
  std::vector<CUmemGenericAllocationHandle> handles;
  const auto release = [&] {
    for (CUmemGenericAllocationHandle h : handles) d.cuMemRelease(h);
  };
  for (int fd : fds) {
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = d.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      release();
      return r;
    }
    handles.push_back(h);
  }
  const std::size_t bytes = im->chunks * im->chunk_size;
  if (const CUresult r = d.cuMemAddressReserve(&im->range, bytes, im->chunk_size, 0, 0); r != CUDA_SUCCESS) {
    release();
    return r;
  }
  std::size_t mapped = 0;
  CUresult r = CUDA_SUCCESS;
  for (; mapped < handles.size() && r == CUDA_SUCCESS; ++mapped) {
    r = d.cuMemMap(im->range + mapped * im->chunk_size, im->chunk_size, 0, handles[mapped], 0);
    if (r != CUDA_SUCCESS) break;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.cuMemSetAccess(im->range, bytes, &access, 1);
  }
  release();  // mapped or not, the handles go: a mapping keeps its memory
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
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, forget_in_child); });
  const HandleData h = decode(handle);
  if ((flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == static_cast<std::uint32_t>(getpid())) {
    return refuse(h, "it was exported by this process (the driver refuses that too)", CUDA_ERROR_INVALID_CONTEXT);
  }
  const driver::RealDriver* real = driver::real();
  if (real == nullptr || real->table.cuMemImportFromShareableHandle == nullptr) return CUDA_ERROR_NO_DEVICE;
  const driver::Table& d = real->table;
  std::string error;
  const std::string path = socket_path(static_cast<pid_t>(h.pid), &error);
  const int fd = path.empty() ? -1 : connect_to(path, &error);
  if (fd < 0) return refuse(h, "cannot reach the exporter (it exited, or is not a uvmpool process of this user): " + error);
  const auto fail = [&](const std::string& why, CUresult r = CUDA_ERROR_INVALID_VALUE) {
    close(fd);
    return refuse(h, why, r);
  };
  pid_t pid = 0;
  uid_t uid = 0;
  if (!peer(fd, &pid, &uid) || uid != geteuid() || pid != static_cast<pid_t>(h.pid)) {
    return fail("the socket's owner (pid " + std::to_string(pid) + ", uid " + std::to_string(uid) +
                ") is not the exporter of this user");
  }
  set_timeouts(fd, 30);
  Request req;
  req.allocation = h.allocation;
  std::memcpy(req.secret, h.secret, sizeof req.secret);
  Reply reply;
  if (!send_all(fd, &req, sizeof req) || !recv_all(fd, &reply, sizeof reply) || reply.magic != kProtocolMagic) {
    return fail("the exporter did not answer");
  }
  if (reply.status != CUDA_SUCCESS) {
    return fail("the exporter refused it (freed, never exported, or a wrong secret): error " +
                std::to_string(reply.status), static_cast<CUresult>(reply.status));
  }
  const bool power_of_two = reply.chunk_size != 0 && (reply.chunk_size & (reply.chunk_size - 1)) == 0;
  if (reply.chunks == 0 || reply.chunks > kMaxChunks || !power_of_two ||
      reply.offset >= std::uint64_t{reply.chunks} * reply.chunk_size ||
      reply.size > std::uint64_t{reply.chunks} * reply.chunk_size - reply.offset) {
    return fail("the exporter's answer does not describe memory (refused)");
  }
  std::vector<int> fds;
  if (!recv_fds(fd, reply.chunks, &fds)) return fail("the exporter's chunks did not arrive");
  Import im;
  im.chunk_size = reply.chunk_size;
  im.chunks = reply.chunks;
  im.connection = fd;
  const CUresult r = map_chunks(d, fds, &im);
  for (int f : fds) close(f);
  if (r != CUDA_SUCCESS) return fail("importing or mapping its chunks failed", r);
  *out = im.range + reply.offset;
  std::lock_guard lock(g->mu);
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
