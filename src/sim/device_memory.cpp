#include "sim/device_memory.h"

#include <algorithm>

#include "sim/contexts.h"

namespace uvmpool::sim {
namespace {

enum class Tier { Device, Host, Pageable };

bool is_device_location(const CUmemLocation& l, int device) {
  return l.type == CU_MEM_LOCATION_TYPE_DEVICE && l.id == device;
}

// Whether `device` may touch mapping `m` (write access if `write`).
bool device_may(const Mapping& m, int device, bool write) {
  switch (m.kind) {
    case MemoryKind::Device:
      return m.device == device || peer_enabled(device, m.device);
    case MemoryKind::PinnedHost:  // portable and mapped: every device reaches it
      return true;
    case MemoryKind::Vmm:
      for (const Access& a : m.access) {
        if (!is_device_location(a.location, device)) continue;
        return a.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE || (!write && a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ);
      }
      return false;
  }
  return false;
}

// Pinned host memory (cuMemHostAlloc) and host-located VMM handles lie across the PCIe link.
bool on_host(const Mapping& m) { return m.kind == MemoryKind::PinnedHost || m.device < 0; }

// The tier of the byte at `p` and where the run of that tier (one mapping) ends.
Tier tier_at(AddressSpace& space, std::uintptr_t p, std::uintptr_t* end) {
  if (const Mapping* m = space.find_mapping(p)) {
    *end = m->base + m->size;
    return on_host(*m) ? Tier::Host : Tier::Device;
  }
  *end = UINTPTR_MAX;
  return Tier::Pageable;
}

}  // namespace

void* DeviceMemory::reach(std::uintptr_t p, std::uint64_t count, std::size_t size, bool write, std::uint64_t passes) {
  if (count > UINT64_MAX / size) return nullptr;
  const std::uint64_t bytes = count * size;
  if (p == 0 || p + bytes < p || p % size != 0) return nullptr;
  for (std::uintptr_t at = p; at < p + bytes;) {
    const Mapping* m = space_.find_mapping(at);
    if (m == nullptr || !device_may(*m, device_, write) || (m->prot & (write ? PROT_WRITE : PROT_READ)) == 0)
      return nullptr;
    const std::uintptr_t end = std::min<std::uintptr_t>(m->base + m->size, p + bytes);
    const std::uint64_t piece = (end - at) * passes;
    if (on_host(*m))
      (write ? touches_.host_write : touches_.host_read) += piece;
    else
      (write ? touches_.device_write : touches_.device_read) += piece;
    at = end;
  }
  touches_.add_range(p, p + bytes);
  touches_.wrote = touches_.wrote || write;
  return reinterpret_cast<void*>(p);
}

bool pageable_side(AddressSpace& space, std::uintptr_t dst, std::uintptr_t src) {
  std::uintptr_t end = 0;
  return tier_at(space, dst, &end) == Tier::Pageable || tier_at(space, src, &end) == Tier::Pageable;
}

void classify_copy(AddressSpace& space, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes, Touches& t) {
  for (std::size_t done = 0; done < bytes;) {
    std::uintptr_t src_end = 0, dst_end = 0;
    const Tier from = tier_at(space, src + done, &src_end);
    const Tier to = tier_at(space, dst + done, &dst_end);
    const std::size_t piece = std::min({bytes - done, src_end - (src + done), dst_end - (dst + done)});
    if (from == Tier::Device && to == Tier::Device)
      t.device_to_device += piece;
    else if (to == Tier::Device)
      (from == Tier::Host ? t.to_device_pinned : t.to_device_pageable) += piece;
    else if (from == Tier::Device)
      (to == Tier::Host ? t.to_host_pinned : t.to_host_pageable) += piece;
    else
      t.host_to_host += piece;
    if (from != Tier::Pageable) t.add_range(src + done, src + done + piece);
    done += piece;
  }
  if (space.overlaps_arena(dst, bytes)) t.add_range(dst, dst + bytes);
  t.wrote = true;
}

}  // namespace uvmpool::sim
