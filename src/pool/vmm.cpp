#include "pool/vmm.h"

#include <algorithm>
#include <chrono>

#include "config/log.h"
#include "pool/peer_access.h"

namespace uvmpool::pool {
namespace {

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAllocationProp host_prop(const CUmemLocation& location) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = location;
  return prop;
}

// Adds the time since `since` to `*ns` when it is given (a remap's RemapTimes); now, for the next.
std::chrono::steady_clock::time_point add_since(std::uint64_t* ns, std::chrono::steady_clock::time_point since) {
  if (ns == nullptr) return since;
  const auto now = std::chrono::steady_clock::now();
  *ns += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - since).count());
  return now;
}

std::chrono::steady_clock::time_point start_if(const RemapTimes* times) {
  return times != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
}

std::size_t tier_index(Tier t) { return t == Tier::Host ? 1 : 0; }

}  // namespace

void Vmm::init_export() {
  int supported = 0;
  const bool posix = d_.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                             device_) == CUDA_SUCCESS && supported != 0;
  posix_fd_[0].store(posix, std::memory_order_relaxed);
  posix_fd_[1].store(posix && host_.type == CU_MEM_LOCATION_TYPE_HOST_NUMA, std::memory_order_relaxed);
}

std::size_t Vmm::init_host() {
  // The device's own NUMA node keeps PCIe traffic off the socket interconnect; pinning there is also
  // faster than at the plain host location (408 vs 716 us per 2 MiB, measured on an H200).
  int numa_vmm = 0, numa_id = -1;
  if (d_.cuDeviceGetAttribute(&numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_) ==
          CUDA_SUCCESS &&
      numa_vmm != 0 &&
      d_.cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device_) == CUDA_SUCCESS && numa_id >= 0) {
    host_ = CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_id};
  } else {
    host_ = CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0};
  }
  if (d_.cuMemGetAllocationGranularity == nullptr) return 0;
  const CUmemAllocationProp prop = host_prop(host_);
  std::size_t g = 0;
  if (d_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
  return g;
}

std::size_t Vmm::granularity() const {
  if (d_.cuMemGetAllocationGranularity == nullptr) return 0;
  const CUmemAllocationProp prop = device_prop(device_);
  std::size_t g = 0;
  if (d_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
  return g;
}

CUresult Vmm::create_chunks(std::span<Handle> out, std::size_t size, Tier tier) const {
  CUmemAllocationProp prop = tier == Tier::Device ? device_prop(device_) : host_prop(host_);
  std::atomic<bool>& posix = posix_fd_[tier == Tier::Host];
  if (posix.load(std::memory_order_relaxed)) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (std::size_t i = 0; i < out.size(); ++i) {
    CUresult r = d_.cuMemCreate(&out[i], size, &prop, 0);
    if ((r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) && prop.requestedHandleTypes != 0) {
      // The device said it supports POSIX descriptors, the driver refuses them here: plain chunks.
      prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
      r = d_.cuMemCreate(&out[i], size, &prop, 0);
      if (r == CUDA_SUCCESS && posix.exchange(false))
        log::info("device {}: the driver refuses exportable {} chunks; CUDA IPC of pool memory there is off",
                  device_, tier == Tier::Host ? "host" : "device");
    }
    if (r != CUDA_SUCCESS) {
      release_chunks(out.first(i));
      return r;
    }
  }
  return CUDA_SUCCESS;
}

void Vmm::release_chunks(std::span<const Handle> chunks) const {
  for (Handle h : chunks) {
    drop_staging(h);
    const CUresult r = d_.cuMemRelease(h);
    if (r != CUDA_SUCCESS) log::warn("cuMemRelease of a pool chunk failed ({}); its memory may leak", static_cast<int>(r));
  }
}

CUresult Vmm::staging(const Chunk& piece, std::size_t chunk_size, CUdeviceptr* va) const {
  {
    MutexLock lock(staging_mu_);
    if (const auto it = staging_.find(piece.handle); it != staging_.end()) {
      *va = it->second.va;
      return CUDA_SUCCESS;
    }
  }
  // Made outside the lock: only the move that took the piece can ask for it now.
  const std::size_t bytes = piece.granules * chunk_size;
  CUdeviceptr at = 0;
  if (const CUresult r = reserve(&at, bytes, chunk_size); r != CUDA_SUCCESS) return r;
  CUresult r = d_.cuMemMap(at, bytes, 0, piece.handle, 0);
  if (r == CUDA_SUCCESS) {
    // The copy runs on this device's copy engine: no peer needs the staging address.
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d_.cuMemSetAccess(at, bytes, &access, 1);
    if (r != CUDA_SUCCESS && d_.cuMemUnmap(at, bytes) != CUDA_SUCCESS) {
      log::warn("device {}: a staging mapping at {:#x} stays, unused", device_, at);
      return r;  // the reservation stays too: the range is still mapped
    }
  }
  if (r != CUDA_SUCCESS) {
    free_reservation(at, bytes);
    return r;
  }
  MutexLock lock(staging_mu_);
  staging_.emplace(piece.handle, Staging{at, bytes});
  *va = at;
  return CUDA_SUCCESS;
}

void Vmm::drop_staging(Handle h) const {
  Staging s{};
  {
    MutexLock lock(staging_mu_);
    const auto it = staging_.find(h);
    if (it == staging_.end()) return;
    s = it->second;
    staging_.erase(it);
  }
  if (d_.cuMemUnmap(s.va, s.bytes) != CUDA_SUCCESS && d_.cuMemUnmap(s.va, s.bytes) != CUDA_SUCCESS) {
    log::warn("device {}: a staging mapping at {:#x} could not be unmapped; its range stays reserved", device_, s.va);
    return;
  }
  free_reservation(s.va, s.bytes);
}

CUresult Vmm::reserve(CUdeviceptr* va, std::size_t size, std::size_t alignment) const {
  return d_.cuMemAddressReserve(va, size, alignment, 0, 0);
}

void Vmm::free_reservation(CUdeviceptr va, std::size_t size) const {
  const CUresult r = d_.cuMemAddressFree(va, size);
  if (r != CUDA_SUCCESS) log::warn("cuMemAddressFree failed ({})", static_cast<int>(r));
}

CUresult Vmm::map(CUdeviceptr va, std::span<const Chunk> pieces, std::size_t chunk_size, RemapTimes* times) const {
  std::size_t at = 0;
  auto began = start_if(times);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::size_t bytes = pieces[i].granules * chunk_size;
    const CUresult r = d_.cuMemMap(va + at, bytes, 0, pieces[i].handle, 0);
    began = add_since(times != nullptr ? &times->map_ns[tier_index(pieces[i].tier)] : nullptr, began);
    if (r != CUDA_SUCCESS) {
      unmap(va, pieces.first(i), chunk_size);
      return r;
    }
    at += bytes;
  }
  // The device's access (and its peers', src/pool/peer_access.h), over device and host chunks alike.
  // Host access to host chunks would double cuMemSetAccess's cost (134 against 67 us per 2 MiB host
  // chunk on an H200) for no use the program can make of it: it does not know which of its pieces
  // lie in host memory.
  const CUresult granted = PeerAccess::get().grant(d_, device_, va, at);
  if (times != nullptr) {
    const bool host = std::all_of(pieces.begin(), pieces.end(), [](const Chunk& c) { return c.tier == Tier::Host; });
    add_since(&times->access_ns[host ? 1 : 0], began);
  }
  if (granted != CUDA_SUCCESS) {
    unmap(va, pieces, chunk_size);
    return granted;
  }
  return CUDA_SUCCESS;
}

Vmm::Unmapped Vmm::unmap(CUdeviceptr va, std::span<const Chunk> pieces, std::size_t chunk_size) const {
  const std::size_t total = granules_of(pieces) * chunk_size;
  PeerAccess::get().forget(va, total);
  // One call per piece: each was mapped by its own cuMemMap, and the driver unmaps whole mappings.
  std::size_t at = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::size_t bytes = pieces[i].granules * chunk_size;
    CUresult r = d_.cuMemUnmap(va + at, bytes);
    if (r != CUDA_SUCCESS) r = d_.cuMemUnmap(va + at, bytes);  // once more: a passing failure
    if (r == CUDA_SUCCESS) {
      at += bytes;
      continue;
    }
    // This piece and the ones after it stay mapped, with their access (noted again); the ones before
    // it go back where they were.
    if (PeerAccess::get().grant(d_, device_, va + at, total - at) != CUDA_SUCCESS)
      log::warn("device {}: access to {:#x} could not be noted again after a failed unmap", device_, va + at);
    if (i != 0 && map(va, pieces.first(i), chunk_size) != CUDA_SUCCESS) {
      log::error("device {}: cuMemUnmap at {:#x} failed ({}) and the pieces before it could not be mapped back: "
                 "{} bytes at {:#x} are partly mapped and stay out of use",
                 device_, va + at, static_cast<int>(r), total, va);
      return Unmapped::Partly;
    }
    log::warn("device {}: cuMemUnmap at {:#x} failed ({}); the range stays mapped", device_, va + at, static_cast<int>(r));
    return Unmapped::StillMapped;
  }
  return Unmapped::Whole;
}

CUresult Vmm::remap(CUdeviceptr va, std::span<const Chunk> old, std::span<const Chunk> fresh,
                    std::size_t chunk_size, RemapTimes* times) const {
  // Unmap the old pieces one by one; a refusal maps back those already unmapped (the rest never
  // stopped being mapped, with their access).
  std::size_t at = 0;
  for (std::size_t i = 0; i < old.size(); ++i) {
    const std::size_t bytes = old[i].granules * chunk_size;
    PeerAccess::get().forget(va + at, bytes);
    const auto began = start_if(times);
    const CUresult r = d_.cuMemUnmap(va + at, bytes);
    add_since(times != nullptr ? &times->unmap_ns[tier_index(old[i].tier)] : nullptr, began);
    if (r != CUDA_SUCCESS) {
      if (i != 0 && map(va, old.first(i), chunk_size) != CUDA_SUCCESS) {
        log::error("device {}: a failed move could not map back its old chunks at {:#x}", device_, va);
      }
      if (PeerAccess::get().grant(d_, device_, va + at, bytes) != CUDA_SUCCESS) {
        log::warn("device {}: access to {:#x} could not be noted again after a failed move", device_, va + at);
      }
      return r;
    }
    at += bytes;
  }
  // map() maps and sets access all or nothing; failing, the old pieces go back where they were.
  if (const CUresult r = map(va, fresh, chunk_size, times); r != CUDA_SUCCESS) {
    if (map(va, old, chunk_size) != CUDA_SUCCESS) {
      log::error("device {}: a failed move could not map back its old chunks at {:#x}", device_, va);
    }
    return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::pool
