#include "pool/peer_access.h"


#include <vector>

#include "config/log.h"
#include "config/quiet_at_fork.h"

namespace uvmpool::pool {

PeerAccess& PeerAccess::get() {
  static PeerAccess* table = [] {
    auto* t = new PeerAccess;  // never destroyed: hooks may run during exit
    config::at_fork(lock_for_fork, unlock_after_fork, empty_in_child);
    return t;
  }();
  return *table;
}

// Held across fork, so a child never sees the tables half-changed. The analysis cannot pair a lock
// in one handler with its unlock in another.
void PeerAccess::lock_for_fork() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { get().mu_.lock(); }
void PeerAccess::unlock_after_fork() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS { get().mu_.unlock(); }
void PeerAccess::empty_in_child() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
  PeerAccess& p = get();
  p.ranges_.clear();
  for (std::uint64_t& w : p.peers_) w = 0;
  p.mu_.unlock();
}

CUresult PeerAccess::grant(const driver::Table& d, int device, CUdeviceptr va, std::size_t bytes) {
  std::uint64_t peers = 0;
  {
    MutexLock lock(mu_);
    if (device >= 0 && device < kMaxDevices) peers = peers_[device];
    ranges_[va] = Range{bytes, device};
  }
  CUmemAccessDesc access[kMaxDevices];
  unsigned n = 0;
  access[n++] = CUmemAccessDesc{CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for (int i = 0; i < kMaxDevices; ++i) {
    if ((peers >> i & 1) != 0 && i != device)
      access[n++] = CUmemAccessDesc{CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, i}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  }
  const CUresult r = d.cuMemSetAccess(va, bytes, access, n);
  if (r != CUDA_SUCCESS) forget(va, bytes);
  return r;
}

void PeerAccess::forget(CUdeviceptr va, std::size_t bytes) {
  const CUdeviceptr end = va + bytes;
  MutexLock lock(mu_);
  auto it = ranges_.lower_bound(va);
  if (it != ranges_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > va) --it;
  while (it != ranges_.end() && it->first < end) {
    const CUdeviceptr start = it->first, stop = it->first + it->second.bytes;
    const int device = it->second.device;
    it = ranges_.erase(it);
    if (start < va) ranges_[start] = Range{va - start, device};
    if (stop > end) {  // the last one it overlaps
      ranges_.emplace(end, Range{stop - end, device});
      break;
    }
  }
}

void PeerAccess::enabled(const driver::Table& d, int accessor, int owner) {
  if (owner < 0 || owner >= kMaxDevices || accessor < 0 || accessor >= kMaxDevices || owner == accessor) return;
  {
    MutexLock lock(mu_);
    peers_[owner] |= std::uint64_t{1} << accessor;
  }
  set_access(d, accessor, owner, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

void PeerAccess::disabled(const driver::Table& d, int accessor, int owner) {
  if (owner < 0 || owner >= kMaxDevices || accessor < 0 || accessor >= kMaxDevices || owner == accessor) return;
  {
    MutexLock lock(mu_);
    peers_[owner] &= ~(std::uint64_t{1} << accessor);
  }
  set_access(d, accessor, owner, CU_MEM_ACCESS_FLAGS_PROT_NONE);
}

void PeerAccess::set_access(const driver::Table& d, int accessor, int owner, CUmemAccess_flags flags) {
  // Adjacent ranges of the owner are joined: one cuMemSetAccess over several mappings costs about
  // what one over a single mapping does (the cost is per call, docs/architecture.md).
  std::vector<std::pair<CUdeviceptr, std::size_t>> runs;
  {
    MutexLock lock(mu_);
    for (const auto& [va, r] : ranges_) {
      if (r.device != owner) continue;
      if (!runs.empty() && runs.back().first + runs.back().second == va)
        runs.back().second += r.bytes;
      else
        runs.emplace_back(va, r.bytes);
    }
  }
  const CUmemAccessDesc access{CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, accessor}, flags};
  std::size_t failed = 0;
  for (const auto& [va, bytes] : runs) {
    if (d.cuMemSetAccess(va, bytes, &access, 1) != CUDA_SUCCESS) ++failed;  // unmapped meanwhile
  }
  log::debug("peer access {} from device {} to device {}: {} ranges, {} changed meanwhile",
             flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? "revoked" : "granted", accessor, owner, runs.size(), failed);
}

std::uint64_t PeerAccess::peers_of(int owner) {
  MutexLock lock(mu_);
  return owner >= 0 && owner < kMaxDevices ? peers_[owner] : 0;
}

std::size_t PeerAccess::ranges() {
  MutexLock lock(mu_);
  return ranges_.size();
}

}  // namespace uvmpool::pool
