// The driver's virtual memory management calls the pool makes, each sequence in one place with its
// rollback: when any step fails, everything the sequence did is undone and the first error returned,
// so a failed allocation never leaves a handle, a mapping or a reservation behind.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <span>
#include <unordered_map>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::pool {

using Handle = CUmemGenericAllocationHandle;

// Where a chunk's memory lies. Both tiers map into the same ranges; a host chunk is pinned host
// memory the device reaches over PCIe (zero-copy).
enum class Tier : std::uint8_t { Device, Host };

// One piece of physical memory: a handle of `granules` times the pool's chunk size, and its tier. A
// plain chunk has one granule; an extent (device memory only) several, a power of two. The driver
// maps a handle only whole, from offset 0 (measured on an H200: anything else is NOT_SUPPORTED), so
// each piece is one cuMemMap: a mapping can be cut, shrunk or remapped at piece boundaries only, and
// an extent is the unit that would move between tiers.
struct Chunk {
  Handle handle = 0;
  Tier tier = Tier::Device;
  std::uint32_t granules = 1;
};

// Where a remap's driver time went, by call and by the tier of the pieces it acted on (indexed by
// Tier: device 0, host 1). On an H200 a host mapping's cuMemSetAccess and cuMemUnmap cost per byte
// (row 4b: 20.6 and 7.4 us a MiB), a device one's about the same whatever its size (100 and 49 us),
// so these say which side of the moves the commits' time is (DeviceStats::move_set_access_host_us...).
struct RemapTimes {
  std::uint64_t unmap_ns[2] = {}, map_ns[2] = {}, access_ns[2] = {};
};

// Granules in a run of pieces.
inline std::size_t granules_of(std::span<const Chunk> pieces) {
  std::size_t n = 0;
  for (const Chunk& c : pieces) n += c.granules;
  return n;
}

// Granules of a run of pieces that lie in host memory.
inline std::size_t host_granules_of(std::span<const Chunk> pieces) {
  std::size_t n = 0;
  for (const Chunk& c : pieces) n += c.tier == Tier::Host ? c.granules : 0;
  return n;
}

class Vmm {
 public:
  Vmm(const driver::Table& driver, int device) : d_(driver), device_(device) {}

  // Chooses where host chunks go: the device's host NUMA node where the driver supports VMM there,
  // else the plain host location. Returns the host granularity (0 if the driver refuses host chunks).
  std::size_t init_host();
  const CUmemLocation& host_location() const { return host_; }

  const driver::Table& driver() const { return d_; }
  int device() const { return device_; }

  // The minimum allocation granularity of pinned memory on this device (0 if the driver refuses).
  std::size_t granularity() const;

  // Chunks are made exportable (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested) where the device
  // supports it, so CUDA IPC can hand them to another process (src/hooks/ipc_*.cpp). Measured on an
  // H100 it costs nothing at cuMemCreate (docs/architecture.md, CUDA IPC). Host chunks only at a
  // HOST_NUMA location: plain HOST handles cannot have handle types. A driver that refuses the
  // request makes that tier's chunks plain from then on (one log line).
  void init_export();
  bool exportable(Tier tier) const { return posix_fd_[tier == Tier::Host].load(std::memory_order_relaxed); }

  // `count` new physical chunks of `size` bytes each in `tier`, or none at all.
  CUresult create_chunks(std::span<Handle> out, std::size_t size, Tier tier = Tier::Device) const;
  void release_chunks(std::span<const Handle> chunks) const;

  CUresult reserve(CUdeviceptr* va, std::size_t size, std::size_t alignment) const;
  void free_reservation(CUdeviceptr va, std::size_t size) const;

  // Maps the pieces one after another from va (each with one cuMemMap, of either tier) and gives the
  // device read-write access to the whole range with one cuMemSetAccess (one call over a range is far
  // cheaper than one per piece, though its cost still grows with the mappings it covers). All or
  // nothing.
  // `times`, when given, gets the calls' time added (the access to the host tier's when every piece
  // is a host one, else to the device's).
  CUresult map(CUdeviceptr va, std::span<const Chunk> pieces, std::size_t chunk_size,
               RemapTimes* times = nullptr) const;
  // Unmaps the pieces mapped one after another from va, asking once more where the driver refuses.
  // All or nothing, as remap(): a piece the driver keeps mapped stops it, and the pieces before it
  // are mapped back (with their access), so that a range said to be still mapped is mapped whole:
  // CarvedRange leaves such a slot's free space in use. Only where mapping back fails too is it
  // partly mapped, and then out of use for good. Errors are logged.
  enum class Unmapped : std::uint8_t { Whole, StillMapped, Partly };
  Unmapped unmap(CUdeviceptr va, std::span<const Chunk> pieces, std::size_t chunk_size) const;
  // The pieces mapped one after another from va (`old`) replaced by `fresh`, which cover the same
  // bytes, at the same addresses, with access set as map() sets it: the last step of a move
  // (move.cpp). All or nothing: a failing step is undone and `old` is mapped there again, as before.
  // `times`, when given, gets each driver call's time added, by call and tier.
  CUresult remap(CUdeviceptr va, std::span<const Chunk> old, std::span<const Chunk> fresh, std::size_t chunk_size,
                 RemapTimes* times = nullptr) const;

  // Staging mappings: a piece's second mapping, at an address of its own with this device's access,
  // where a move copies into it before the commit maps it at the moved range (move.cpp). Made the
  // first time a handle is a move's target and kept until release_chunks releases the handle (which
  // unmaps it first). Why kept: cuMemMap + cuMemSetAccess at the prepare and cuMemUnmap after the
  // commit cost per mapping (about 47 us a device piece, 94 a 2 MiB host one, on an H200; a host
  // one's grows with its bytes as well), as much as the remap itself, and a buffer that moves back
  // and forth each step used to pay them at every move; a kept mapping costs address space only.
  // `va` is where the piece can be written.
  CUresult staging(const Chunk& piece, std::size_t chunk_size, CUdeviceptr* va) const;

 private:
  void drop_staging(Handle h) const;  // before the handle is released

  const driver::Table& d_;
  int device_;
  CUmemLocation host_{CU_MEM_LOCATION_TYPE_HOST, 0};
  mutable std::atomic<bool> posix_fd_[2] = {false, false};  // device, host
  struct Staging {
    CUdeviceptr va;
    std::size_t bytes;
  };
  // A leaf lock: taken by moves' preparation (under the device pool's lock) and by releases (under
  // it or the host reserve's), never around another lock.
  mutable Mutex staging_mu_;
  mutable std::unordered_map<Handle, Staging> staging_ UVMPOOL_GUARDED_BY(staging_mu_);
};

}  // namespace uvmpool::pool
