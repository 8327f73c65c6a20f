// Moves of carved memory (issue 15, "a chunk can move"; carved_range.h for the range's side). A slot
// of the carved range changes tier whole, at its address, with every allocation in it: the unit is
// the slot because its pieces are mapped whole and each slot is unmapped on its own later (reuse of
// an idle slot, release), so no new piece may span two slots. The steps are move.cpp's (prepare,
// copy, commit or abort); what differs is only where the pieces and the claim live:
//   - the claim is the slot's `moving` flag (CarvedRange::claim, under mu_): idle-slot reuse and
//     release leave a claimed slot alone. Frees and allocations in it go on: neither changes a
//     mapping (the range's bookkeeping only), and the caller orders the program's work against the
//     move as for any live memory. So a carved free never waits for a move.
//   - the owner a move names is the range's entry (one for all carved memory: the address map cannot
//     tell slots apart), so an ordered epoch orders every launch touching carved memory behind it.
//   - figures: the bytes of live carved allocations inside the slot change tier at the commit
//     (live_host_bytes), and a carved allocation's host bytes are its bytes inside slots in host
//     memory when it is freed (note_freed).
//   - a slot in host memory takes no new allocation (its free space is withheld), and once it holds
//     none it is given back (release_idle_host_slots, after a free).
#include "config/log.h"
#include "pool/device_pool.h"

namespace uvmpool::pool {

CUdeviceptr DevicePool::carved_slot_end(CUdeviceptr p) const {
  const CUdeviceptr base = carve_base_.load(std::memory_order_acquire);
  const std::size_t extent = carved_slot_bytes();
  if (base == 0 || extent == 0 || p < base) return 0;
  return base + ((p - base) / extent + 1) * extent;
}

CUresult DevicePool::prepare_carved_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* m, MoveWaits waits) {
  const std::optional<std::size_t> slot = carve_range_ ? carve_range_->slot_of(p) : std::nullopt;
  if (!slot) return CUDA_ERROR_INVALID_VALUE;  // no slot mapped there: freed and given back since
  const std::size_t extent = carve_range_->extent();
  // A group's members move with it (its handle maps whole; carved_range.h, "Groups").
  const std::size_t first = carve_range_->mapping_first(*slot), slots = carve_range_->mapping_slots(*slot);
  // One mapping a move (Pool::runs_in_tier cuts at slot ends).
  if (bytes > carve_range_->slot_start(first) + slots * extent - p) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = carve_range_->claim(*slot); r != CUDA_SUCCESS) return r;  // moving already, or exported
  if (carve_range_->slot_pieces(*slot).front().tier == to) {  // there already: nothing to do, nothing held
    carve_range_->unclaim_mapping(first);
    return CUDA_SUCCESS;
  }
  m->address = carve_range_->slot_start(first);
  m->bytes = slots * extent;
  m->to = to;
  m->device = device_;
  m->owner = carved_entry();
  if (const CUresult r = take_staged_target(m, waits, HostShape::Whole); r != CUDA_SUCCESS) {
    carve_range_->unclaim_mapping(first);
    *m = Move{};
    return r;
  }
  if (!carve_range_->splits_into_slots(m->target)) {  // a group's target must be pieces of a slot each
    log::warn("device {}: a carved group's move target spans slots; refused", device_);
    return_chunks(m->target);  // with their staging mappings, as a refused prepare's
    carve_range_->unclaim_mapping(first);
    *m = Move{};
    fig_.moves_failed.fetch_add(1, std::memory_order_relaxed);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fig_.moves_in_flight.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

bool DevicePool::carved_moving(CUdeviceptr p) {
  const std::optional<AllocationInfo> info = describe_carved(p);
  return info && carve_range_ && carve_range_->moving(info->base, info->size);
}

std::uint64_t DevicePool::carved_live_within(CUdeviceptr from, CUdeviceptr to) {
  std::uint64_t bytes = 0;
  auto it = carved_info_.upper_bound(from);
  if (it != carved_info_.begin()) --it;  // one that begins before `from` may reach into it
  for (; it != carved_info_.end() && it->first < to; ++it) {
    if (it->second.state != kLive) continue;
    const CUdeviceptr lo = std::max(it->first, from), hi = std::min<CUdeviceptr>(it->first + it->second.size, to);
    if (lo < hi) bytes += hi - lo;
  }
  return bytes;
}

std::uint64_t DevicePool::carved_host_bytes(CUdeviceptr p, std::size_t bytes) const {
  // The address map's tier marks, which a commit sets under carve_index_mu_ (swap_pieces): read
  // without mu_, so that a pending allocation taken back on its stream (stream_reuse.cpp) counts
  // its host bytes as the commit does.
  if (map_.host_granules() == 0) return 0;  // no host memory mapped anywhere
  std::uint64_t host = 0;
  for (CUdeviceptr at = p; at < p + bytes;) {
    const AddressMap::Probe hit = map_.probe(at);
    const CUdeviceptr end = std::min<CUdeviceptr>(p + bytes, std::max<CUdeviceptr>(hit.granule_end, at + 1));
    if (hit.host) host += end - at;
    at = end;
  }
  return host;
}

CUcontext DevicePool::carved_pending_within(CUdeviceptr from, CUdeviceptr to) {
  MutexLock index(carve_index_mu_);
  auto it = carved_info_.upper_bound(from);
  if (it != carved_info_.begin()) --it;
  for (; it != carved_info_.end() && it->first < to; ++it) {
    if (it->second.state == kPending && it->first + it->second.size > from) return it->second.context;
  }
  return nullptr;
}

std::size_t DevicePool::release_idle_host_slots() {
  if (!carve_range_ || carve_range_->idle_host_slots() == 0) return 0;
  const std::size_t released = carve_range_->release_idle_host();
  if (released != 0) log::debug("device {}: {} carved slots in host memory held no allocation; given back", device_, released);
  return released;
}

}  // namespace uvmpool::pool
