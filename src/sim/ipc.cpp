// Sharing memory between processes: legacy CUDA IPC of cuMemAlloc memory (cuIpcGetMemHandle,
// cuIpcOpenMemHandle, cuIpcCloseMemHandle) and POSIX file descriptors of VMM handles
// (cuMemExportToShareableHandle, cuMemImportFromShareableHandle). Every piece of memory is a memfd,
// so both come down to giving another process the memfd:
//   - a VMM handle's descriptor is a dup of its memfd; importing one makes a handle over it;
//   - a legacy handle names the exporter's pid, the memfd's descriptor number there and its inode;
//     the importer opens /proc/<pid>/fd/<n> (the same user may) and checks the inode, so a
//     descriptor number the exporter has since reused for other memory is refused.
// Memory another process made is not charged to this one's capacity (that process was charged), and
// it stays valid here until closed or released, whatever its maker does meanwhile, as on a GPU.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "config/log.h"
#include "hooks/ipc_handle.h"
#include "sim/address_space.h"
#include "sim/clock.h"
#include "sim/contexts.h"
#include "sim/devices.h"
#include "sim/entry_points.h"

namespace uvmpool::sim {
namespace {

// What the sim's legacy handle holds (64 bytes, CU_IPC_HANDLE_SIZE).
constexpr std::uint64_t kSimMagic = 0x5049504d49534d55ull;  // "UMSIMPIP"
struct SimHandle {
  std::uint64_t magic = kSimMagic;
  std::uint32_t pid = 0;
  std::int32_t fd = -1;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;       // mapped bytes
  std::uint64_t user_size = 0;  // bytes asked for
  std::int32_t device = -1;
  std::uint8_t reserved[20] = {};
};
static_assert(sizeof(SimHandle) == CU_IPC_HANDLE_SIZE);

// The location a memfd's name records (address_space.cpp names them), or false if the descriptor is
// not memory of a simulated driver.
bool memory_location(int fd, int* device) {
  char link[64];
  char target[128] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  if (readlink(link, target, sizeof target - 1) < 0) return false;
  const std::string name(target);
  if (name.rfind("/memfd:uvmpool-sim-host", 0) == 0) {
    *device = -1;
    return true;
  }
  constexpr const char* kDevice = "/memfd:uvmpool-sim-device-";
  if (name.rfind(kDevice, 0) != 0) return false;
  *device = std::atoi(name.c_str() + std::strlen(kDevice));
  return valid_device(*device);
}

}  // namespace

CUresult impl::cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle_v1 handle,
                                            CUmemAllocationHandleType type, unsigned long long flags) {
  if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;  // Linux, no IMEX
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  Physical* physical = space.find_physical(handle);
  if (physical == nullptr || physical->handle_refs == 0 || physical->fd < 0) return CUDA_ERROR_INVALID_VALUE;
  // Only the handle types asked for at cuMemCreate can be exported (documented).
  if ((physical->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = fcntl(physical->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  clock::charge(clock::costs().export_ns);  // UVMPOOL_SIM_EXPORT_NS
  return CUDA_SUCCESS;
}

// The caller keeps its descriptor (and closes it when it likes); the handle holds a copy.
CUresult impl::cuMemImportFromShareableHandle(CUmemGenericAllocationHandle_v1* handle, void* os_handle,
                                              CUmemAllocationHandleType type) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int given = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  int device = -1;
  struct stat st {};
  if (given < 0 || fstat(given, &st) != 0 || !memory_location(given, &device) || st.st_size <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  Physical* physical = space.adopt_physical(fd, static_cast<std::size_t>(st.st_size), device);
  // An exportable handle was made with POSIX descriptors requested; a host one, at the host NUMA
  // node (plain HOST handles cannot have handle types).
  physical->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  physical->prop.location = device < 0 ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}
                                       : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
  physical->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  physical->handle_refs = 1;
  *handle = physical->id;
  clock::charge(clock::costs().import_ns);  // UVMPOOL_SIM_IMPORT_NS
  return CUDA_SUCCESS;
}

// Any address inside a cuMemAlloc allocation: the handle names the whole allocation, and the
// importer gets its base. Memory opened from another process cannot be exported again.
CUresult impl::cuIpcGetMemHandle(CUipcMemHandle_v1* handle, CUdeviceptr_v2 dptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const Mapping* m = space.find_mapping(dptr);
  if (m == nullptr || m->kind != MemoryKind::Device || m->ipc_opened) return CUDA_ERROR_INVALID_VALUE;
  const Physical* physical = space.find_physical(m->physical);
  struct stat st {};
  if (physical == nullptr || physical->fd < 0 || fstat(physical->fd, &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  SimHandle h;
  h.pid = static_cast<std::uint32_t>(getpid());
  h.fd = physical->fd;
  h.inode = st.st_ino;
  h.size = m->size;
  h.user_size = m->user_size;
  h.device = m->device;
  static_assert(sizeof h == sizeof handle->reserved);
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult impl::cuIpcOpenMemHandle_v2(CUdeviceptr_v2* dptr, CUipcMemHandle_v1 handle, unsigned int flags) {
  if (dptr == nullptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (ipc::is_uvmpool_handle(handle)) {
    const ipc::HandleData d = ipc::decode(handle);
    log::error("cuIpcOpenMemHandle: the handle was made by uvmpool (process {}, its pool memory); only a "
               "process running under uvmpool can open it (LD_PRELOAD=libuvmpool.so or uvmpool-run)", d.pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  SimHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kSimMagic || h.fd < 0 || h.size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == static_cast<std::uint32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;  // not in its own process
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/fd/%d", h.pid, h.fd);
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_ino != h.inode || static_cast<std::uint64_t>(st.st_size) < h.size) {
    log::debug("cuIpcOpenMemHandle: {} is gone or is other memory now (errno {})", path, errno);
    if (fd >= 0) close(fd);
    return CUDA_ERROR_INVALID_VALUE;  // the exporter exited or freed the memory
  }
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  const std::optional<std::uintptr_t> base = space.take_range(h.size, std::size_t{2} << 20, 0);
  Physical* physical = space.adopt_physical(fd, h.size, h.device);
  if (!base || !space.map_physical(*base, *physical, h.size, PROT_READ | PROT_WRITE)) {
    if (base) space.give_back_range(*base, h.size);
    space.drop_if_unused(physical->id);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  close(physical->fd);  // the mapping keeps the memory
  physical->fd = -1;
  physical->mappings = 1;
  Mapping& m = space.mappings[*base];
  m.base = *base;
  m.size = h.size;
  m.user_size = h.user_size;
  m.kind = MemoryKind::Device;
  m.physical = physical->id;
  m.context = context;
  m.device = context->device;
  m.buffer_id = space.next_buffer_id();
  m.prot = PROT_READ | PROT_WRITE;
  m.ipc_opened = true;
  *dptr = *base;
  return CUDA_SUCCESS;
}

CUresult impl::cuIpcCloseMemHandle(CUdeviceptr_v2 dptr) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  return space.free_mapped(dptr, MemoryKind::Device, /*ipc_opened=*/true);
}

}  // namespace uvmpool::sim
