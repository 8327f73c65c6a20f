#include "sim/address_space.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include "config/log.h"
#include "sim/contexts.h"
#include "sim/devices.h"
#include "sim/settings.h"

namespace uvmpool::sim {
namespace {

AddressSpace* g_instance = nullptr;

// As much address space as the kernel grants, from 4 TiB down: PROT_NONE + MAP_NORESERVE costs
// neither memory nor commit charge.
constexpr std::size_t kLargestArena = std::size_t{4} << 40;
constexpr std::size_t kSmallestArena = std::size_t{1} << 30;

constexpr int kReservedFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// memfd_create, raising the soft limit on open files once if it is reached: every live VMM handle
// keeps its memfd open, and pools hold thousands of handles.
int new_memfd(const char* name) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0 && errno == EMFILE) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = limit.rlim_max;
      setrlimit(RLIMIT_NOFILE, &limit);
      fd = memfd_create(name, MFD_CLOEXEC);
    }
  }
  return fd;
}

std::size_t pool_index(int device) { return device < 0 ? static_cast<std::size_t>(device_count()) : device; }

}  // namespace

bool AddressSpace::create() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (std::size_t size = kLargestArena; size >= kSmallestArena; size /= 2) {
      void* base = mmap(nullptr, size, PROT_NONE, kReservedFlags, -1, 0);
      if (base == MAP_FAILED) continue;
      g_instance = new AddressSpace(reinterpret_cast<std::uintptr_t>(base), size);  // never destroyed
      log::debug("device address space: {} GiB at {}", size >> 30, base);
      return;
    }
    log::error("could not reserve address space for device memory");
  });
  return g_instance != nullptr;
}

AddressSpace& AddressSpace::get() { return *g_instance; }

AddressSpace::AddressSpace(std::uintptr_t base, std::size_t size)
    : arena_base_(base), arena_size_(size), used_(static_cast<std::size_t>(device_count()) + 1, 0) {
  free_[base] = size;
}

bool AddressSpace::overlaps_arena(std::uintptr_t p, std::size_t n) const {
  return p < arena_base_ + arena_size_ && p + n > arena_base_;
}

std::optional<std::uintptr_t> AddressSpace::take_range(std::size_t size, std::size_t alignment,
                                                       std::uintptr_t hint) {
  if (size == 0 || size > arena_size_) return std::nullopt;
  auto carve = [&](std::map<std::uintptr_t, std::size_t>::iterator it, std::uintptr_t start) {
    const std::uintptr_t range_base = it->first;
    const std::uintptr_t range_end = it->first + it->second;
    free_.erase(it);
    if (start > range_base) free_[range_base] = start - range_base;
    if (start + size < range_end) free_[start + size] = range_end - (start + size);
    return start;
  };
  if (hint != 0 && hint % alignment == 0) {
    auto it = free_.upper_bound(hint);
    if (it != free_.begin()) {
      --it;
      if (hint >= it->first && hint - it->first + size <= it->second) return carve(it, hint);
    }
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uintptr_t start = align_up(it->first, alignment);
    if (start - it->first + size <= it->second) return carve(it, start);
  }
  return std::nullopt;
}

void AddressSpace::give_back_range(std::uintptr_t base, std::size_t size) {
  auto next = free_.lower_bound(base);
  if (next != free_.end() && base + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == base) {
      previous->second += size;
      return;
    }
  }
  free_[base] = size;
}

CUresult AddressSpace::create_physical(std::size_t size, int device, Physical** out) {
  if (used(device) + size > capacity(device) || size > capacity(device)) return CUDA_ERROR_OUT_OF_MEMORY;
  // The name says where the memory lies, for cuMemImportFromShareableHandle in another process
  // (sim/ipc.cpp reads it back through /proc/self/fd).
  char name[32];
  if (device < 0)
    std::snprintf(name, sizeof name, "uvmpool-sim-host");
  else
    std::snprintf(name, sizeof name, "uvmpool-sim-device-%d", device);
  const int fd = new_memfd(name);
  if (fd < 0) {
    log::warn("memfd_create failed (errno {}); reporting out of memory", errno);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = adopt_physical(fd, size, device);
  (*out)->imported = false;
  used_[pool_index(device)] += size;
  return CUDA_SUCCESS;
}

Physical* AddressSpace::adopt_physical(int fd, std::size_t size, int device) {
  const std::uint64_t id = next_physical_id_++;
  Physical& physical = physicals_[id];
  physical.id = id;
  physical.fd = fd;
  physical.size = size;
  physical.device = device;
  physical.imported = true;
  return &physical;
}

Physical* AddressSpace::find_physical(std::uint64_t id) {
  auto it = physicals_.find(id);
  return it == physicals_.end() ? nullptr : &it->second;
}

void AddressSpace::drop_if_unused(std::uint64_t id) {
  auto it = physicals_.find(id);
  if (it == physicals_.end() || it->second.handle_refs != 0 || it->second.mappings != 0) return;
  if (it->second.fd >= 0) close(it->second.fd);
  if (!it->second.imported) used_[pool_index(it->second.device)] -= it->second.size;
  physicals_.erase(it);
}

bool AddressSpace::map_physical(std::uintptr_t at, const Physical& physical, std::size_t size, int prot) {
  void* p = mmap(reinterpret_cast<void*>(at), size, prot, MAP_SHARED | MAP_FIXED, physical.fd, 0);
  return p != MAP_FAILED;
}

// Remapping memory (the pool's moves, tiering) makes a new mapping, whose pages would then be
// faulted in one at a time on first touch: in a virtual machine each fault costs microseconds, and
// the tiering replays spent nearly half their time there. Memory whose pages all exist (written
// before) is populated in one call. A memfd with holes is left alone: populating would allocate
// memory the program never touched.
void AddressSpace::populate(std::uintptr_t at, std::size_t size, const Physical& physical, int prot) {
  struct stat st {};
  if (physical.fd < 0 || fstat(physical.fd, &st) != 0) return;
  if (static_cast<std::size_t>(st.st_blocks) * 512 < size) return;
  madvise(reinterpret_cast<void*>(at), size, (prot & PROT_WRITE) != 0 ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

void AddressSpace::unmap_range(std::uintptr_t at, std::size_t size) {
  if (mmap(reinterpret_cast<void*>(at), size, PROT_NONE, kReservedFlags | MAP_FIXED, -1, 0) == MAP_FAILED)
    log::error("could not return [{:#x}, +{:#x}) to the reserved address space (errno {})", at, size, errno);
}

CUresult AddressSpace::allocate_mapped(MemoryKind kind, const Context* context, int device,
                                       std::size_t user_size, std::size_t alignment, std::uintptr_t* out) {
  if (user_size > arena_size_) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::size_t size = align_up(user_size, alignment);
  const int pool = kind == MemoryKind::PinnedHost ? -1 : device;
  Physical* physical = nullptr;
  if (CUresult status = create_physical(size, pool, &physical); status != CUDA_SUCCESS) return status;
  const std::optional<std::uintptr_t> base = take_range(size, alignment, 0);
  if (!base || !map_physical(*base, *physical, size, PROT_READ | PROT_WRITE)) {
    if (base) give_back_range(*base, size);
    drop_if_unused(physical->id);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Never mapped again here: the mapping alone keeps the memory. Device memory keeps its memfd open
  // while it lives, for legacy IPC: another process opens it through /proc/<pid>/fd (sim/ipc.cpp).
  if (kind != MemoryKind::Device) {
    close(physical->fd);
    physical->fd = -1;
  }
  physical->mappings = 1;
  Mapping& m = mappings[*base];
  m.base = *base;
  m.size = size;
  m.user_size = user_size;
  m.kind = kind;
  m.physical = physical->id;
  m.context = context;
  m.device = device;
  m.buffer_id = next_buffer_id();
  m.prot = PROT_READ | PROT_WRITE;
  *out = *base;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::free_mapped(std::uintptr_t base, MemoryKind kind, bool ipc_opened) {
  auto it = mappings.find(base);
  if (it == mappings.end() || it->second.kind != kind || it->second.ipc_opened != ipc_opened)
    return CUDA_ERROR_INVALID_VALUE;
  const Mapping m = it->second;
  mappings.erase(it);
  unmap_range(m.base, m.size);
  give_back_range(m.base, m.size);
  if (Physical* physical = find_physical(m.physical)) {
    --physical->mappings;
    drop_if_unused(m.physical);
  }
  return CUDA_SUCCESS;
}

Mapping* AddressSpace::find_mapping(std::uintptr_t p) {
  auto it = mappings.upper_bound(p);
  if (it == mappings.begin()) return nullptr;
  --it;
  return p - it->first < it->second.size ? &it->second : nullptr;
}

const Reservation* AddressSpace::find_reservation(std::uintptr_t p) const {
  auto it = reservations.upper_bound(p);
  if (it == reservations.begin()) return nullptr;
  --it;
  return p - it->first < it->second.size ? &it->second : nullptr;
}

std::vector<Mapping*> AddressSpace::whole_mappings(std::uintptr_t p, std::size_t n) {
  std::vector<Mapping*> covering;
  std::uintptr_t at = p;
  while (at < p + n) {
    auto it = mappings.find(at);
    if (it == mappings.end()) return {};
    covering.push_back(&it->second);
    at += it->second.size;
  }
  if (at != p + n) return {};
  return covering;
}

bool AddressSpace::accessible(std::uintptr_t p, std::size_t n, bool write) {
  const int needed = write ? PROT_WRITE : PROT_READ;
  std::uintptr_t at = p;
  Mapping* m = find_mapping(at);
  while (m != nullptr && (m->prot & needed) != 0) {
    at = m->base + m->size;
    if (at >= p + n) return true;
    auto next = mappings.find(at);  // the next mapping must start where this one ends
    m = next == mappings.end() ? nullptr : &next->second;
  }
  return false;
}

std::uint64_t AddressSpace::used(int device) const { return used_[pool_index(device)]; }

std::uint64_t AddressSpace::capacity(int device) const {
  return device < 0 ? settings().host_memory : settings().device_memory;
}

void AddressSpace::charge_context(int device, bool active) {
  const std::uint64_t total = capacity(device);
  const std::uint64_t reserve = std::min(total, align_up(std::max<std::uint64_t>(total / 256, 1), 2u << 20));
  if (active)
    used_[pool_index(device)] += reserve;
  else
    used_[pool_index(device)] -= reserve;
}

void context_started(const Context* context) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  space.charge_context(context->device, true);
}

void release_context_memory(const Context* context) {
  AddressSpace& space = AddressSpace::get();
  std::unique_lock lock(space.mutex);
  space.charge_context(context->device, false);
  struct Owned {
    std::uintptr_t base;
    MemoryKind kind;
    bool ipc_opened;
  };
  std::vector<Owned> owned;
  for (const auto& [base, m] : space.mappings)
    if (m.context == context && m.kind != MemoryKind::Vmm) owned.push_back({base, m.kind, m.ipc_opened});
  for (const Owned& o : owned) space.free_mapped(o.base, o.kind, o.ipc_opened);
}

}  // namespace uvmpool::sim
