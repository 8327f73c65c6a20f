// The simulated device address space. Device addresses are real host addresses inside one large
// PROT_NONE reservation (the arena), so host code can read device memory directly and no other host
// mapping can ever land on a device address. Every piece of physical memory (a cuMemAlloc allocation,
// pinned host memory, a cuMemCreate handle) is a memfd of its size: two mappings of one handle see
// the same bytes, and pages are only committed when touched.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "driver/driver_api.h"

namespace uvmpool::sim {

struct Context;

enum class MemoryKind {
  Device,      // cuMemAlloc and the stream-ordered allocations
  PinnedHost,  // cuMemHostAlloc / cuMemAllocHost
  Vmm,         // a cuMemMap of a cuMemCreate handle
};

// Physical memory: one memfd, charged against one device's or the host's capacity.
struct Physical {
  std::uint64_t id = 0;        // for VMM handles, also the CUmemGenericAllocationHandle
  int fd = -1;                 // kept open only while it may be mapped again (VMM handles)
  std::size_t size = 0;
  int device = -1;             // the device whose capacity it uses; -1: the host's
  CUmemAllocationProp prop{};  // VMM handles: as given to cuMemCreate
  unsigned handle_refs = 0;    // VMM handles: cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  unsigned mappings = 0;
  bool imported = false;       // another process's memory (IPC): charged to that process's capacity
};

struct Access {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

// A range of the arena backed by physical memory.
struct Mapping {
  std::uintptr_t base = 0;
  std::size_t size = 0;       // mapped bytes (whole pages)
  std::size_t user_size = 0;  // bytes asked for (cuMemAlloc's bytesize); the mapped size for VMM
  MemoryKind kind = MemoryKind::Device;
  std::uint64_t physical = 0;
  const Context* context = nullptr;  // Device, PinnedHost: the context it was allocated in
  int device = -1;                   // the device holding the memory; -1 for host memory
  std::uint64_t buffer_id = 0;       // unique per allocation / mapping, never reused
  std::vector<Access> access;        // VMM: set by cuMemSetAccess, empty after cuMemMap
  int prot = PROT_NONE;              // the host protection in force
  bool ipc_opened = false;           // Device: another process's cuMemAlloc memory (cuIpcOpenMemHandle);
                                     // cuIpcCloseMemHandle unmaps it, cuMemFree refuses it
};

// A cuMemAddressReserve range.
struct Reservation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
};

class AddressSpace {
 public:
  // Reserves the arena (at cuInit). False if not even a small one could be reserved.
  static bool create();
  static AddressSpace& get();

  // Shared while memory is read or written through mappings, unique while the maps change. Every
  // member below expects the caller to hold it.
  std::shared_mutex mutex;

  bool overlaps_arena(std::uintptr_t p, std::size_t n) const;

  // A free range of the arena, aligned, at `hint` if that is free; nullopt if none is left.
  std::optional<std::uintptr_t> take_range(std::size_t size, std::size_t alignment, std::uintptr_t hint);
  // Returns a range (already back to PROT_NONE) to the free ranges.
  void give_back_range(std::uintptr_t base, std::size_t size);

  // New physical memory of `size` bytes charged to `device` (-1: host); OUT_OF_MEMORY over capacity.
  CUresult create_physical(std::size_t size, int device, Physical** out);
  // Another process's memory, `fd` (taken over) of `size` bytes, that lies on `device` (-1: the
  // host): not charged here, since the process that made it was charged (CUDA IPC).
  Physical* adopt_physical(int fd, std::size_t size, int device);
  Physical* find_physical(std::uint64_t id);
  // Frees physical memory nothing refers to any more, giving its bytes back to the capacity.
  void drop_if_unused(std::uint64_t id);

  // mmap of the memfd at `at` (MAP_SHARED | MAP_FIXED).
  bool map_physical(std::uintptr_t at, const Physical& physical, std::size_t size, int prot);
  // Fills the page tables of [at, +size), mapped from `physical` with `prot`, if every page of the
  // memory already exists (never allocates one): see address_space.cpp.
  void populate(std::uintptr_t at, std::size_t size, const Physical& physical, int prot);
  // Turns [at, at + size) back into reserved, inaccessible address space.
  void unmap_range(std::uintptr_t at, std::size_t size);

  // cuMemAlloc / cuMemHostAlloc: new memory mapped read-write.
  CUresult allocate_mapped(MemoryKind kind, const Context* context, int device, std::size_t user_size,
                           std::size_t alignment, std::uintptr_t* out);
  // cuMemFree / cuMemFreeHost: `base` must start a mapping of that kind (not one opened by CUDA IPC,
  // unless `ipc_opened`: cuIpcCloseMemHandle).
  CUresult free_mapped(std::uintptr_t base, MemoryKind kind, bool ipc_opened = false);

  Mapping* find_mapping(std::uintptr_t p);  // the mapping containing p
  const Reservation* find_reservation(std::uintptr_t p) const;
  // The mappings covering [p, p + n) exactly, from first to last, without holes, or empty.
  std::vector<Mapping*> whole_mappings(std::uintptr_t p, std::size_t n);
  // Whether [p, p + n) is mapped without holes and readable (writable if `write`) from the host.
  bool accessible(std::uintptr_t p, std::size_t n, bool write);

  std::uint64_t used(int device) const;  // -1: host
  // A context takes some of its device's memory while active, as on a GPU (so cuMemGetInfo's free
  // is below total even with nothing allocated): 1/256 of the device, at least 2 MiB.
  void charge_context(int device, bool active);
  std::uint64_t capacity(int device) const;
  std::uint64_t next_buffer_id() { return next_buffer_id_++; }

  std::map<std::uintptr_t, Mapping> mappings;
  std::map<std::uintptr_t, Reservation> reservations;

 private:
  AddressSpace(std::uintptr_t base, std::size_t size);

  std::uintptr_t arena_base_;
  std::size_t arena_size_;
  std::map<std::uintptr_t, std::size_t> free_;  // free ranges of the arena: base -> size
  std::map<std::uint64_t, Physical> physicals_;
  std::vector<std::uint64_t> used_;  // per device, then the host last
  std::uint64_t next_physical_id_ = 0x100000001ull;
  std::uint64_t next_buffer_id_ = 1;
};

// Frees the cuMemAlloc and pinned host memory of a context that stopped being active, and the
// device memory the context itself took.
void release_context_memory(const Context* context);
// Charges the device memory a context takes when it becomes active.
void context_started(const Context* context);

inline std::uint64_t align_up(std::uint64_t v, std::uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

}  // namespace uvmpool::sim
