// CUDA IPC of pool memory (docs/architecture.md "CUDA IPC", docs/security.md). The driver's legacy
// IPC cannot export VMM memory, so uvmpool does it itself: cuIpcGetMemHandle on a pool allocation
// returns a uvmpool handle (ipc_handle.h); cuIpcOpenMemHandle of such a handle in another uvmpool
// process fetches the chunks' POSIX descriptors from the exporter over a Unix socket, imports them
// and maps them into one range of its own. Handles of the driver's own memory pass through.
//   ipc_socket.cpp  the socket: its path, peer credentials, descriptors over SCM_RIGHTS
//   ipc_export.cpp  the exporter: the table of exported allocations, the server thread, deferred frees
//   ipc_import.cpp  the importer: open and close
#pragma once

#include "driver/driver_api.h"
#include "hooks/ipc_handle.h"

namespace uvmpool::pool {
class Pool;
}

namespace uvmpool::ipc {

// cuIpcGetMemHandle of `p`, memory of `pool` (any address inside a live allocation; the handle
// names the whole allocation). Starts the server thread on first use. NOT_SUPPORTED (one log line)
// when the allocation's chunks cannot be exported (spilled to plain-HOST chunks, or a driver that
// refused exportable chunks).
CUresult export_handle(pool::Pool& pool, CUdeviceptr p, CUipcMemHandle* out);

// The stream of a cuMemFreeAsync, and whether it is capturing a graph.
struct AsyncFree {
  CUstream stream = nullptr;
  bool capturing = false;
};

// cuMemFree (async == nullptr) / cuMemFreeAsync of `p`. True when IPC took the free over: an
// exported allocation still open in another process stays allocated (the pool frees it when the last
// importer closes, so its chunks are not reused under the importer's mapping; after a cuMemFreeAsync,
// also only once the freeing stream's work before the free has completed); a second free is answered
// INVALID_VALUE. False: not exported, no longer open anywhere, or freed on a capturing stream (its
// handle is forgotten; the caller frees it, and the pool never reuses a capture's free).
bool take_free(CUdeviceptr p, CUresult* result, const AsyncFree* async = nullptr);
// Whether any allocation is exported now (a free need not ask take_free otherwise; no lock).
bool exporting();

// Whether `h` names an allocation this very process exported: its pid and its server's token. A pid
// alone does not say so: the first process of each container is pid 1 in its own pid namespace.
bool exported_here(const HandleData& h);

// cuIpcOpenMemHandle of a uvmpool handle (is_uvmpool_handle). Maps the exporter's chunks with
// read-write access for the current context's device; *out is the allocation's address here.
CUresult open_handle(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags);

// cuIpcCloseMemHandle: true if `p` is a uvmpool import (then unmapped, and the exporter told),
// false if it is not ours (the caller asks the driver).
bool close_handle(CUdeviceptr p, CUresult* result);

}  // namespace uvmpool::ipc
