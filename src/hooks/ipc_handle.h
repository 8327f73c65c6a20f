// The CUipcMemHandle uvmpool hands out for pool memory (cuIpcGetMemHandle), and what its server and
// importers say to each other over the exporter's Unix socket (src/hooks/ipc_*.cpp,
// docs/architecture.md "CUDA IPC"). Header only: the simulated driver includes it too, to tell a
// uvmpool handle that reached a process without uvmpool and say so.
//
// A handle names one allocation of one process: the exporter's pid and a random token drawn when its
// server started (together its socket's name: two processes of one pid in two pid namespaces that
// share /dev/shm, containers run with --ipc=host, name different sockets), the allocation's buffer id
// and a 128-bit random secret drawn when it was first exported. It is a
// capability: whoever holds it (and runs as the same user) may map the memory, as with the driver's
// own handles. The secret keeps a process that can reach the socket from opening allocations it was
// never given (ids are small counters; pids are guessable).
#pragma once

#include <cstdint>
#include <cstring>

#include "driver/driver_api.h"

namespace uvmpool::ipc {

// "UVMPIPC1" read as a little-endian integer: the first 8 bytes of every uvmpool handle. The
// driver's own handles are opaque; a collision would need the driver to put exactly these bytes first.
inline constexpr std::uint64_t kHandleMagic = 0x31435049504d5655ull;
inline constexpr std::size_t kSecretBytes = 16;

struct HandleData {
  std::uint64_t magic = kHandleMagic;
  std::uint32_t pid = 0;          // the exporter
  std::int32_t device = -1;       // the exporter's device (for logs; the importer maps for its own)
  std::uint64_t allocation = 0;   // the allocation's buffer id in the exporter
  std::uint64_t size = 0;         // bytes asked for (for logs and checks)
  unsigned char secret[kSecretBytes] = {};
  std::uint64_t token = 0;         // the exporter's socket's name with its pid (0: by its pid alone, as before)
  std::uint8_t reserved[8] = {};   // zero
};
static_assert(sizeof(HandleData) == CU_IPC_HANDLE_SIZE, "a uvmpool handle fills one CUipcMemHandle");

inline bool is_uvmpool_handle(const CUipcMemHandle& h) {
  std::uint64_t magic = 0;
  std::memcpy(&magic, h.reserved, sizeof magic);
  return magic == kHandleMagic;
}

inline HandleData decode(const CUipcMemHandle& h) {
  HandleData d;
  std::memcpy(&d, h.reserved, sizeof d);
  return d;
}

inline CUipcMemHandle encode(const HandleData& d) {
  CUipcMemHandle h{};
  std::memcpy(h.reserved, &d, sizeof d);
  return h;
}

// The protocol (one connection per open handle; the importer keeps it open until it closes the
// handle, so the exporter knows the memory is still mapped elsewhere, and learns of an importer's
// death from the socket's end):
//   importer -> exporter  Request
//   exporter -> importer  Reply, then Reply::chunks uint32 sizes (each piece's size in chunk_size
//                         units: 1 for a chunk, more for an extent), then Reply::chunks file
//                         descriptors (SCM_RIGHTS, kFdsPerMessage a message, each carrying one byte)
//   importer closes the connection when it closes the handle.
inline constexpr std::uint32_t kProtocolMagic = 0x75766d49;  // "Imvu"
inline constexpr std::uint32_t kProtocolVersion = 2;           // 2: pieces of several chunks (extents)
inline constexpr std::uint32_t kMaxChunks = 1u << 20;          // 2 TiB of 2 MiB chunks: a sanity bound
inline constexpr int kFdsPerMessage = 64;                      // under the kernel's 253 (SCM_MAX_FD)

struct Request {
  std::uint32_t magic = kProtocolMagic;
  std::uint32_t version = kProtocolVersion;
  std::uint64_t allocation = 0;
  unsigned char secret[kSecretBytes] = {};
};

struct Reply {
  std::uint32_t magic = kProtocolMagic;
  std::int32_t status = CUDA_SUCCESS;  // a CUresult: anything else, and no descriptors follow
  std::uint64_t size = 0;              // the allocation's bytes
  std::uint64_t offset = 0;            // where it starts in the mapping of its chunks
  std::uint64_t chunk_size = 0;
  std::uint32_t chunks = 0;            // handles (pieces) that follow
  std::int32_t device = -1;
};

}  // namespace uvmpool::ipc
