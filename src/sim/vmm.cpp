// Virtual memory management: reservations, physical handles (memfds), mappings and access. None of
// these need a current context (NCCL and PyTorch call them from threads without one).
#include <algorithm>
#include <mutex>

#include "sim/address_space.h"
#include "sim/clock.h"
#include "sim/devices.h"
#include "sim/entry_points.h"
#include "sim/race_detector.h"
#include "sim/settings.h"
#include "sim/timeline.h"

namespace uvmpool::sim {
namespace {

std::size_t granularity() { return settings().granularity; }

bool is_host(const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_HOST || location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
}

// The sim has one host NUMA node, 0 (as CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID says). HOST_NUMA_CURRENT
// is refused by cuMemCreate but has a granularity (both documented and measured on an H200).
CUresult check_location(const CUmemLocation& location, bool allow_numa_current = false) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return allow_numa_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return valid_device(location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:  // id ignored
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return location.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult check_properties(const CUmemAllocationProp* prop, bool allow_numa_current = false) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = check_location(prop->location, allow_numa_current); status != CUDA_SUCCESS) return status;
  const unsigned long long handle_types = prop->requestedHandleTypes;
  // HOST allocations are not IPC capable: any handle type is CUDA_ERROR_INVALID_VALUE (documented).
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && handle_types != CU_MEM_HANDLE_TYPE_NONE)
    return CUDA_ERROR_INVALID_VALUE;
  if ((handle_types & ~static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                                                      CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT |
                                                      CU_MEM_HANDLE_TYPE_FABRIC)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // Windows handles do not exist on Linux; fabric handles need IMEX, which the sim does not have.
  if ((handle_types & ~static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0)
    return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

// A live handle: created or retained and not released as often.
Physical* find_handle(AddressSpace& space, CUmemGenericAllocationHandle handle) {
  Physical* physical = space.find_physical(handle);
  return physical != nullptr && physical->handle_refs > 0 ? physical : nullptr;
}

Mapping* find_vmm_mapping(AddressSpace& space, std::uintptr_t address) {
  Mapping* m = space.find_mapping(address);
  return m != nullptr && m->kind == MemoryKind::Vmm ? m : nullptr;
}

bool same_location(const CUmemLocation& a, const CUmemLocation& b) {
  if (is_host(a) && is_host(b)) return true;  // one host NUMA node: HOST and HOST_NUMA 0 are one
  return a.type == b.type && a.id == b.id;
}

// The host protection a mapping needs: the widest access any location has.
int protection(const std::vector<Access>& access) {
  int prot = PROT_NONE;
  for (const Access& a : access) {
    if (a.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot |= PROT_READ | PROT_WRITE;
    if (a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ) prot |= PROT_READ;
  }
  return prot;
}

bool granular(std::uint64_t value) { return value % granularity() == 0; }

// The modeled host cost of a VMM call on memory of one tier (vmm calls charge all of their own cost).
std::uint64_t by_tier(bool host, std::uint64_t device_ns, std::uint64_t host_ns) { return host ? host_ns : device_ns; }

}  // namespace

CUresult impl::cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp_v1* prop,
                                             CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = check_properties(prop, /*allow_numa_current=*/true); status != CUDA_SUCCESS) return status;
  *granularity = sim::granularity();  // minimum and recommended are the same here
  return CUDA_SUCCESS;
}

// Size a multiple of the granularity (measured on an H200 with driver 580: cuda.h only asks for the
// host page size, the driver insists on the granularity); hint a multiple of the page size;
// alignment 0 or a power of two. The range is aligned to at least the granularity, and the hint is
// honoured when that range is free and suitably aligned, otherwise ignored (it is only a hint).
CUresult impl::cuMemAddressReserve(CUdeviceptr_v2* ptr, size_t size, size_t alignment, CUdeviceptr_v2 addr,
                                   unsigned long long flags) {
  if (ptr == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!granular(size) || addr % page_size() != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (std::size_t{1} << 62) || alignment > (std::size_t{1} << 62)) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::size_t aligned_to = std::max<std::size_t>(alignment, granularity());
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  const std::optional<std::uintptr_t> base = space.take_range(size, aligned_to, addr);
  if (!base) return CUDA_ERROR_OUT_OF_MEMORY;
  space.reservations[*base] = Reservation{*base, size};
  *ptr = *base;
  return CUDA_SUCCESS;
}

// ptr and size must be exactly a reservation's. A reservation still holding mappings is refused:
// unmapping is the caller's job.
CUresult impl::cuMemAddressFree(CUdeviceptr_v2 ptr, size_t size) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  auto it = space.reservations.find(ptr);
  if (it == space.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  const Reservation reservation = it->second;
  auto first_mapping = space.mappings.lower_bound(reservation.base);
  if (first_mapping != space.mappings.end() && first_mapping->first < reservation.base + reservation.size)
    return CUDA_ERROR_INVALID_VALUE;
  detector::check("cuMemAddressFree", reservation.base, reservation.base + reservation.size);
  space.reservations.erase(it);
  space.give_back_range(reservation.base, reservation.size);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemCreate(CUmemGenericAllocationHandle_v1* handle, size_t size, const CUmemAllocationProp_v1* prop,
                           unsigned long long flags) {
  if (handle == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = check_properties(prop); status != CUDA_SUCCESS) return status;
  if (!granular(size)) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  Physical* physical = nullptr;
  const int pool = is_host(prop->location) ? -1 : prop->location.id;
  if (CUresult status = space.create_physical(size, pool, &physical); status != CUDA_SUCCESS) return status;
  physical->prop = *prop;
  physical->handle_refs = 1;
  *handle = physical->id;
  const Costs& c = clock::costs();
  clock::charge(pool < 0 ? clock::per_gib_ns(size, c.create_host_ns_per_gib)
                         : c.create_device_ns + clock::per_gib_ns(size, c.create_device_ns_per_gib));
  return CUDA_SUCCESS;
}

// The memory itself lives on while mapped; it returns to its capacity when released and unmapped.
CUresult impl::cuMemRelease(CUmemGenericAllocationHandle_v1 handle) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  Physical* physical = find_handle(space, handle);
  if (physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool host = physical->device < 0;
  const std::size_t size = physical->size;
  // The last reference going while mapped: the next unmap frees the memory, so it counts as a change
  // now. Dropping a reference cuMemRetainAllocationHandle added changes nothing (a query's).
  if (physical->mappings != 0 && physical->handle_refs == 1 && detector::any_records())
    for (const auto& [base, m] : space.mappings)
      if (m.physical == handle) detector::check("cuMemRelease of a handle mapped at", m.base, m.base + m.size);
  --physical->handle_refs;
  space.drop_if_unused(handle);
  const Costs& c = clock::costs();
  clock::charge(by_tier(host, c.release_device_ns, c.release_host_ns + clock::per_gib_ns(size, c.release_host_ns_per_gib)) +
                clock::per_gib_ns(size, c.release_ns_per_gib));
  return CUDA_SUCCESS;
}

// Measured on an H200 (driver 580): a mapping covers its whole handle from offset 0; anything else
// (part of a handle, an offset, a size off the granularity or beyond the handle) is
// CUDA_ERROR_NOT_SUPPORTED, checked before the address. The address must be granular and the range
// an unmapped part of one reservation, else CUDA_ERROR_INVALID_VALUE. The new mapping has no access
// (PROT_NONE) until cuMemSetAccess.
CUresult impl::cuMemMap(CUdeviceptr_v2 ptr, size_t size, size_t offset, CUmemGenericAllocationHandle_v1 handle,
                        unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  Physical* physical = find_handle(space, handle);
  if (physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (offset != 0 || size != physical->size) return CUDA_ERROR_NOT_SUPPORTED;
  if (!granular(ptr)) return CUDA_ERROR_INVALID_VALUE;
  const Reservation* reservation = space.find_reservation(ptr);
  if (reservation == nullptr || size > reservation->base + reservation->size - ptr) return CUDA_ERROR_INVALID_VALUE;
  // Only unmapped parts of a reservation can be mapped.
  auto next = space.mappings.lower_bound(ptr);
  if (space.find_mapping(ptr) != nullptr || (next != space.mappings.end() && next->first < ptr + size))
    return CUDA_ERROR_INVALID_VALUE;
  detector::check("cuMemMap", ptr, ptr + size);
  if (!space.map_physical(ptr, *physical, size, PROT_NONE)) return CUDA_ERROR_OUT_OF_MEMORY;
  clock::charge(by_tier(physical->device < 0, clock::costs().map_device_ns, clock::costs().map_host_ns));
  ++physical->mappings;
  Mapping& m = space.mappings[ptr];
  m.base = ptr;
  m.size = size;
  m.user_size = size;
  m.kind = MemoryKind::Vmm;
  m.physical = physical->id;
  m.device = is_host(physical->prop.location) ? -1 : physical->prop.location.id;
  m.buffer_id = space.next_buffer_id();
  m.prot = PROT_NONE;
  return CUDA_SUCCESS;
}

// Measured on an H200 (driver 580): the range must lie in one reservation and may not cut a mapping,
// but may contain unmapped holes (even be entirely unmapped: CUDA_SUCCESS, nothing to do). Every
// mapping inside it is unmapped, each at the cost of a call of its own (one call over 4 to 64 adjacent
// 2 MiB mappings: 0.87 to 0.96 of the time of one call each, device and host-located alike; H200,
// tests/gpu/unmap_costs.py).
CUresult impl::cuMemUnmap(CUdeviceptr_v2 ptr, size_t size) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  const Reservation* reservation = space.find_reservation(ptr);
  if (reservation == nullptr || size > reservation->base + reservation->size - ptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::uintptr_t> inside;
  if (const Mapping* first = space.find_mapping(ptr); first != nullptr && first->base != ptr)
    return CUDA_ERROR_INVALID_VALUE;  // cuts the mapping it starts in
  for (auto it = space.mappings.lower_bound(ptr); it != space.mappings.end() && it->first < ptr + size; ++it) {
    if (it->first + it->second.size > ptr + size) return CUDA_ERROR_INVALID_VALUE;  // cuts the last one
    inside.push_back(it->first);
  }
  if (!inside.empty()) detector::check("cuMemUnmap", ptr, ptr + size);
  for (std::uintptr_t base : inside) {
    const Mapping gone = space.mappings.at(base);
    // A host-located mapping's cost grows with its bytes, a device mapping's does not (measured on an
    // H200, docs/tiering.md).
    const Costs& c = clock::costs();
    clock::charge(by_tier(gone.device < 0, c.unmap_device_ns, c.unmap_host_ns + clock::per_gib_ns(gone.size, c.unmap_host_ns_per_gib)));
    space.mappings.erase(base);
    space.unmap_range(gone.base, gone.size);
    if (Physical* physical = space.find_physical(gone.physical)) {
      --physical->mappings;
      space.drop_if_unused(gone.physical);
    }
  }
  return CUDA_SUCCESS;
}

// The range must be fully mapped and consist of whole mappings. Device access makes the memory
// readable/writable by the host too, since device and host are the same memory here.
CUresult impl::cuMemSetAccess(CUdeviceptr_v2 ptr, size_t size, const CUmemAccessDesc_v1* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < count; ++i) {
    if (CUresult status = check_location(desc[i].location); status != CUDA_SUCCESS) return status;
    const CUmemAccess_flags f = desc[i].flags;
    if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  std::vector<Mapping*> covered = space.whole_mappings(ptr, size);
  if (covered.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (const Mapping* m : covered) {
    if (m->kind != MemoryKind::Vmm) return CUDA_ERROR_INVALID_VALUE;
    // HOST_NUMA access only for memory that lives on the host (documented).
    for (std::size_t i = 0; i < count; ++i)
      if (desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && m->device >= 0) return CUDA_ERROR_INVALID_VALUE;
  }
  // Taking a device's access away (or down to read-only) under work that uses the range is a race.
  for (std::size_t i = 0; i < count; ++i)
    if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      detector::check("cuMemSetAccess taking device access away from", ptr, ptr + size);
      break;
    }
  const Costs& c = clock::costs();
  clock::charge(clock::per_gib_ns(size, c.set_access_ns_per_gib));
  for (Mapping* m : covered) {
    clock::charge(by_tier(m->device < 0, c.set_access_device_ns,
                          c.set_access_host_ns + clock::per_gib_ns(m->size, c.set_access_host_ns_per_gib)));
    for (std::size_t i = 0; i < count; ++i) {
      std::erase_if(m->access, [&](const Access& a) { return same_location(a.location, desc[i].location); });
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) m->access.push_back({desc[i].location, desc[i].flags});
    }
    m->prot = protection(m->access);
    mprotect(reinterpret_cast<void*>(m->base), m->size, m->prot);
    if (m->prot != PROT_NONE)
      if (const Physical* physical = space.find_physical(m->physical)) space.populate(m->base, m->size, *physical, m->prot);
  }
  const std::size_t mappings = covered.size();
  lock.unlock();
  // On an H200 each mapping whose access is set waits for copies running on its device's copy
  // engines, about 1 ms whatever the mapping (device or host, 2 or 32 MiB), and a call over several
  // mappings waits once for each (16 device mappings of 32 MiB in one call: 17 ms beside copies
  // against 0.5 alone; tests/gpu/remap_under_load.py --span): modeled as the rest of the copies, up
  // to that, once a mapping.
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;
    for (std::size_t k = 0; k < mappings; ++k) {
      const std::uint64_t now = clock::now(), busy = timeline::copies_busy_until(desc[i].location.id);
      if (busy <= now) break;
      clock::charge(std::min(busy - now, c.set_access_beside_copy_ns));
    }
    break;  // the device's copy engines, whichever descriptors name it
  }
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetAccess(unsigned long long* flags, const CUmemLocation_v1* location, CUdeviceptr_v2 ptr) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = check_location(*location); status != CUDA_SUCCESS) return status;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const Mapping* m = find_vmm_mapping(space, ptr);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  for (const Access& a : m->access)
    if (same_location(a.location, *location)) *flags = a.flags;
  return CUDA_SUCCESS;
}

// Any address inside a mapping, not only its start; each call is a reference to cuMemRelease.
CUresult impl::cuMemRetainAllocationHandle(CUmemGenericAllocationHandle_v1* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  const Mapping* m = find_vmm_mapping(space, reinterpret_cast<std::uintptr_t>(addr));
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Physical* physical = space.find_physical(m->physical);
  if (physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++physical->handle_refs;
  *handle = physical->id;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp_v1* prop,
                                                      CUmemGenericAllocationHandle_v1 handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  AddressSpace& space = AddressSpace::get();
  std::shared_lock lock(space.mutex);
  const Physical* physical = find_handle(space, handle);
  if (physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = physical->prop;
  return CUDA_SUCCESS;
}

}  // namespace uvmpool::sim
