#include "pool/carved_range.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "config/log.h"
#include "config/size_math.h"

namespace uvmpool::pool {

CarvedRange::CarvedRange(const Vmm& vmm, Source& source, CUdeviceptr base, std::size_t bytes, std::size_t extent,
                         std::size_t chunk, std::size_t unit, std::size_t small_max, std::size_t group_max)
    : vmm_(vmm),
      source_(source),
      base_(base),
      extent_(extent),
      chunk_(chunk),
      unit_(unit),
      small_max_(small_max != 0 ? small_max : extent / 16),
      group_max_(std::max<std::size_t>(group_max, 1)),
      slots_(bytes / extent) {}

CarvedRange::~CarvedRange() {
  bool fenced = false;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].pieces.empty() || slots_[i].group_index != 0) continue;  // a group from its first slot
    if (slots_[i].retired) {  // partly mapped: not unmapped again; its handles go (a handle may be mapped twice)
      const std::vector<Chunk> pieces = mapping_pieces(i);
      source_.unmapped(slot_va(i), pieces);
      source_.give_back(pieces);
      continue;
    }
    if (!std::exchange(fenced, true)) source_.before_unmap();
    if (const std::vector<Chunk> pieces = unmap_slot(i); !pieces.empty()) source_.give_back(pieces);
  }
}

CUresult CarvedRange::allocate(std::size_t bytes, CUdeviceptr* out, bool grow_ok, const Hint& hint) {
  if (bytes == 0 || bytes > slots_.size() * extent_) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::size_t rounded = div_ceil(bytes, unit_) * unit_;
  const Lane lane = lane_for(rounded);
  std::optional<CUdeviceptr> at;
  for (std::size_t i = 0; i < hint.wants.size() && !at; ++i) {
    const CUdeviceptr want = hint.wants[i];
    if (want != 0 && contains(want) && (want - base_) % unit_ == 0 && free_in(lane).take_at(want, rounded)) at = want;
  }
  if (!at) at = free_in(lane).take(rounded, hint.avoid);
  // Idle slots of the other lane next, one at a time: free memory, no driver call.
  while (!at && relane_idle(lane)) at = free_in(lane).take(rounded, hint.avoid);
  if (!at) {
    if (!grow_ok) return CUDA_ERROR_OUT_OF_MEMORY;
    const std::optional<Window> w = place(rounded, lane);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    if (const CUresult r = grow(*w, rounded, lane); r != CUDA_SUCCESS) return r;
    if (!free_in(lane).take_at(w->start, rounded)) {
      log::error("carved range at {:#x}: grown for {} bytes at {:#x}, which is not free", base_, rounded, w->start);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    at = w->start;
  }
  live_.emplace(*at, rounded);
  count_use(*at, rounded, true);
  figures_.live_bytes += rounded;
  ++figures_.allocations;
  *out = *at;
  return CUDA_SUCCESS;
}

CUresult CarvedRange::free(CUdeviceptr p) {
  auto it = live_.find(p);
  if (it == live_.end()) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t bytes = it->second;
  live_.erase(it);
  count_use(p, bytes, false);
  // Free again, but what lies in a slot in host memory: withheld until the slot comes back. A run of
  // device slots of one lane goes back in one piece (one index update, not one a slot: a 1 GiB free
  // spans 32 slots).
  for (CUdeviceptr at = p; at < p + bytes;) {
    const std::size_t i = (at - base_) / extent_;
    CUdeviceptr end = std::min<CUdeviceptr>(p + bytes, slot_va(i) + extent_);
    for (std::size_t j = i + 1; end < p + bytes && slots_[j].on_host() == slots_[i].on_host() &&
                                slots_[j].lane == slots_[i].lane;
         ++j)
      end = std::min<CUdeviceptr>(p + bytes, slot_va(j) + extent_);
    if (!slots_[i].on_host()) free_of_slot(i).give_back(at, end - at);
    at = end;
  }
  figures_.live_bytes -= bytes;
  --figures_.allocations;
  return CUDA_SUCCESS;
}

std::optional<CarvedRange::Found> CarvedRange::find(CUdeviceptr p) const {
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (p >= it->first + it->second) return std::nullopt;
  return Found{it->first, it->second};
}

bool CarvedRange::relane_idle(Lane lane) {
  if (idle_ == 0) return false;
  for (std::size_t i = reach_; i-- > 0;) {
    Slot& s = slots_[i];
    if (idle_kind(s) != Idle::Device || s.moving || s.lane == lane) continue;
    if (!free_of_slot(i).take_at(slot_va(i), extent_)) continue;  // not wholly free after all
    s.lane = lane;
    free_in(lane).give_back(slot_va(i), extent_);
    ++figures_.relaned;
    return true;
  }
  return false;
}

std::optional<CarvedRange::Window> CarvedRange::place(std::size_t bytes, Lane lane) const {
  // Every run of unmapped slots, with the free space that ends where it begins and, if the run alone
  // is too short, the free space that begins where it ends: the one that maps fewest slots, then the
  // lowest. Free space of the lane only: a request never spans slots of both.
  const RangeAllocator& free = free_in(lane);
  std::optional<Window> best;
  for (std::size_t h0 = 0; h0 < slots_.size();) {
    if (!slots_[h0].pieces.empty()) {
      ++h0;
      continue;
    }
    // Past reach_ nothing was ever mapped: one run to the end, not walked.
    std::size_t h1 = h0;
    while (h1 < reach_ && slots_[h1].pieces.empty()) ++h1;
    if (h1 == reach_) h1 = slots_.size();
    const CUdeviceptr start = free.free_ending_at(slot_va(h0)).value_or(slot_va(h0));
    const std::size_t before = slot_va(h0) - start;
    std::size_t count = div_ceil(bytes - std::min(bytes, before), extent_);
    if (count > h1 - h0) {
      const std::size_t after = h1 < slots_.size() ? free.free_starting_at(slot_va(h1)) : 0;
      count = before + (h1 - h0) * extent_ + after >= bytes ? h1 - h0 : 0;
    }
    if (count != 0 && (!best || count < best->count)) best = Window{start, h0, count};
    h0 = h1;
  }
  return best;
}

CUresult CarvedRange::grow(const Window& w, std::size_t bytes, Lane lane) {
  const std::size_t granules = extent_ / chunk_;
  // What each slot of the window is mapped with, in address order.
  struct Fill {
    std::vector<Chunk> pieces;  // a group member's: its share
    std::uint32_t group_slots = 1, group_index = 0;
  };
  std::vector<Fill> fills;
  fills.reserve(w.count);
  // Idle slots first, highest first, none that the window overlaps: memory the range already holds.
  // A group's only whole, all of it idle, where the window has room for all of it: its handle maps
  // whole.
  bool fenced = false;
  for (std::size_t i = idle_ != 0 ? reach_ : 0; i-- > 0 && fills.size() < w.count;) {
    const Slot& s = slots_[i];
    if (s.group_index + 1 != s.group_slots) continue;  // a group is looked at once, from its last member
    const std::size_t first = mapping_first(i);
    const std::uint32_t n = s.group_slots;
    i = first;
    if (n > w.count - fills.size()) continue;
    if (slot_va(first) < w.start + bytes && slot_va(first + n) > w.start) continue;
    if (!take_idle(first)) continue;
    if (!std::exchange(fenced, true)) source_.before_unmap();
    std::vector<Chunk> moved = unmap_slot(first);
    if (moved.empty()) {  // the driver kept it mapped: it stays, free, where it was
      keep_mapped(first, n);
      continue;
    }
    if (n == 1) {
      fills.push_back({std::move(moved)});
    } else {
      const Chunk& h = moved.front();
      for (std::uint32_t k = 0; k < n; ++k) fills.push_back({{Chunk{h.handle, h.tier, h.granules / n}}, n, k});
    }
    figures_.remapped += n;
  }
  // Then new memory: several slots as one group where the source makes one ("Groups" above).
  // Only slots the request covers whole: they fall idle together when it is freed, where a slot at
  // either end is shared with its neighbours and may stay in use (the churn replay's peak: 1.075
  // grouping every new slot, against 1.050 without groups).
  const auto covered = [&](std::size_t k) {
    return slot_va(w.first + k) >= w.start && slot_va(w.first + k + 1) <= w.start + bytes;
  };
  while (fills.size() < w.count) {
    std::size_t whole = 0;
    while (fills.size() + whole < w.count && whole < group_max_ && covered(fills.size() + whole)) ++whole;
    Chunk group;
    if (whole >= 2 && source_.take_group(whole * granules, &group) == CUDA_SUCCESS) {
      const std::uint32_t n = static_cast<std::uint32_t>(group.granules / granules);
      for (std::uint32_t k = 0; k < n; ++k) fills.push_back({{Chunk{group.handle, group.tier, static_cast<std::uint32_t>(granules)}}, n, k});
      figures_.taken += n;
      ++figures_.groups;
      continue;
    }
    std::vector<Chunk> fresh;
    if (source_.take(granules, &fresh) != CUDA_SUCCESS) break;
    fills.push_back({std::move(fresh)});
    ++figures_.taken;
  }
  // The mappings' pieces: a group's handle whole, once.
  std::vector<Chunk> all;
  for (const Fill& f : fills) {
    if (f.group_slots == 1) {
      all.insert(all.end(), f.pieces.begin(), f.pieces.end());
    } else if (f.group_index == 0) {
      all.push_back({f.pieces.front().handle, f.pieces.front().tier, static_cast<std::uint32_t>(granules * f.group_slots)});
    }
  }
  if (fills.size() < w.count) {
    source_.give_back(all);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (const CUresult r = vmm_.map(slot_va(w.first), all, chunk_); r != CUDA_SUCCESS) {
    log::debug("carved range at {:#x}: mapping {} slots failed ({})", base_, w.count, static_cast<int>(r));
    source_.give_back(all);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (std::size_t k = 0; k < w.count; ++k) {
    Slot& s = slots_[w.first + k];
    s.pieces = std::move(fills[k].pieces);
    s.group_slots = fills[k].group_slots;
    s.group_index = fills[k].group_index;
    s.lane = lane;
  }
  mapped_ += w.count;
  reach_ = std::max(reach_, w.first + w.count);
  idle_ += w.count;  // until the allocation it was grown for counts its use
  source_.mapped(slot_va(w.first), all);
  free_in(lane).give_back(slot_va(w.first), w.count * extent_);
  figures_.peak_slots_mapped = std::max(figures_.peak_slots_mapped, mapped_);
  return CUDA_SUCCESS;
}

std::vector<Chunk> CarvedRange::mapping_pieces(std::size_t first) const {
  const Slot& s = slots_[first];
  if (s.group_slots == 1 || s.pieces.empty()) return s.pieces;
  const Chunk& share = s.pieces.front();
  return {Chunk{share.handle, share.tier, share.granules * s.group_slots}};
}

bool CarvedRange::splits_into_slots(std::span<const Chunk> pieces) const {
  std::size_t at = 0;
  for (const Chunk& c : pieces) {
    const std::size_t end = at + c.granules * chunk_;
    if (at / extent_ != (end - 1) / extent_) return false;  // spans a slot boundary
    at = end;
  }
  return at % extent_ == 0;
}

bool CarvedRange::take_idle(std::size_t first) {
  const std::size_t n = slots_[first].group_slots;
  for (std::size_t k = 0; k < n; ++k) {
    const Slot& s = slots_[first + k];
    if (idle_kind(s) != Idle::Device || s.moving) return false;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = first + k;
    if (free_of_slot(i).take_at(slot_va(i), extent_)) continue;
    for (std::size_t j = 0; j < k; ++j) free_of_slot(first + j).give_back(slot_va(first + j), extent_);  // not wholly free after all
    return false;
  }
  return true;
}

std::vector<Chunk> CarvedRange::unmap_slot(std::size_t first) {
  std::vector<Chunk> pieces = mapping_pieces(first);
  const std::size_t n = slots_[first].group_slots;
  switch (vmm_.unmap(slot_va(first), pieces, chunk_)) {
    case Vmm::Unmapped::Whole: break;
    case Vmm::Unmapped::StillMapped:
      log::warn("carved range at {:#x}: slot {} stayed mapped", base_, first);
      return {};
    case Vmm::Unmapped::Partly:
      log::error("carved range at {:#x}: slot {} is partly mapped and out of use for good", base_, first);
      for (std::size_t k = first; k < first + n; ++k) {
        const Idle was = idle_kind(slots_[k]);
        slots_[k].retired = true;
        ++figures_.retired;
        recount(k, was);
      }
      return {};
  }
  for (std::size_t k = 0; k < n; ++k) {
    Slot& s = slots_[first + k];
    const Idle was = idle_kind(s);
    if (s.on_host()) --host_;
    s.pieces.clear();
    s.exported = false;
    s.group_slots = 1;
    s.group_index = 0;
    --mapped_;
    recount(first + k, was);
  }
  source_.unmapped(slot_va(first), pieces);
  return pieces;
}

void CarvedRange::keep_mapped(std::size_t first, std::size_t n) {
  for (std::size_t k = first; k < first + n; ++k) {
    if (!slots_[k].retired) free_of_slot(k).give_back(slot_va(k), extent_);
  }
}

void CarvedRange::recount(std::size_t i, Idle was) {
  const Idle now = idle_kind(slots_[i]);
  if (now == was) return;
  if (was == Idle::Device) --idle_;
  if (was == Idle::Host) --idle_host_;
  if (now == Idle::Device) ++idle_;
  if (now == Idle::Host) ++idle_host_;
}

std::vector<std::pair<CUdeviceptr, std::size_t>> CarvedRange::gaps(std::size_t i) const {
  std::vector<std::pair<CUdeviceptr, std::size_t>> out;
  const CUdeviceptr lo = slot_va(i), hi = lo + extent_;
  CUdeviceptr at = lo;
  auto it = live_.upper_bound(lo);
  if (it != live_.begin()) --it;  // the allocation that may begin before the slot and reach into it
  for (; it != live_.end() && it->first < hi; ++it) {
    const CUdeviceptr end = it->first + it->second;
    if (end <= at) continue;
    if (it->first > at) out.emplace_back(at, it->first - at);
    at = std::min(end, hi);
  }
  if (at < hi) out.emplace_back(at, hi - at);
  return out;
}

std::uint64_t CarvedRange::withheld_bytes() const {
  std::uint64_t n = 0;
  for (const Slot& s : slots_) n += s.on_host() && !s.retired ? extent_ - s.used : 0;
  return n;
}

std::optional<std::size_t> CarvedRange::slot_of(CUdeviceptr p) const {
  if (!contains(p)) return std::nullopt;
  const std::size_t i = (p - base_) / extent_;
  if (slots_[i].pieces.empty()) return std::nullopt;
  return i;
}

CUresult CarvedRange::claim(std::size_t i) {
  if (slots_[i].pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t first = mapping_first(i), n = slots_[i].group_slots;
  for (std::size_t k = first; k < first + n; ++k) {
    if (slots_[k].moving) return CUDA_ERROR_NOT_READY;
    if (slots_[k].exported) return CUDA_ERROR_NOT_PERMITTED;
  }
  for (std::size_t k = first; k < first + n; ++k) slots_[k].moving = true;
  return CUDA_SUCCESS;
}

void CarvedRange::unclaim(std::size_t i) { slots_[i].moving = false; }

bool CarvedRange::moving(CUdeviceptr start, std::size_t bytes) const {
  if (bytes == 0 || !contains(start)) return false;
  const std::size_t from = (start - base_) / extent_, to = (start + bytes - 1 - base_) / extent_;
  for (std::size_t i = from; i <= to && i < slots_.size(); ++i) {
    if (slots_[i].moving) return true;
  }
  return false;
}

void CarvedRange::mark_exported(CUdeviceptr start, std::size_t bytes) {
  if (bytes == 0 || !contains(start)) return;
  const std::size_t from = (start - base_) / extent_, to = (start + bytes - 1 - base_) / extent_;
  for (std::size_t i = from; i <= to && i < slots_.size(); ++i) slots_[i].exported = !slots_[i].pieces.empty();
}

void CarvedRange::swapped(std::size_t first, std::vector<Chunk> pieces) {
  const std::size_t n = slots_[first].group_slots;
  if (n == 1) {
    swap_slot(first, std::move(pieces));
    return;
  }
  // A group's members, each onto its own pieces (splits_into_slots): a group no more.
  auto it = pieces.begin();
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<Chunk> own;
    for (std::size_t g = 0; g < extent_ / chunk_ && it != pieces.end(); ++it) {
      own.push_back(*it);
      g += it->granules;
    }
    slots_[first + k].group_slots = 1;
    slots_[first + k].group_index = 0;
    swap_slot(first + k, std::move(own));
  }
}

void CarvedRange::swap_slot(std::size_t i, std::vector<Chunk> pieces) {
  Slot& s = slots_[i];
  const Idle was = idle_kind(s);
  const bool was_host = s.on_host();
  s.pieces = std::move(pieces);
  if (s.on_host() != was_host) {
    if (was_host) {
      --host_;
    } else {
      ++host_;
    }
    for (const auto& [at, bytes] : gaps(i)) {
      if (!was_host) {
        if (!free_of_slot(i).take_at(at, bytes))
          log::error("carved range at {:#x}: free space at {:#x} of slot {} was not free", base_, at, i);
      } else {
        free_of_slot(i).give_back(at, bytes);
      }
    }
  }
  recount(i, was);
}

std::size_t CarvedRange::release_idle_host() {
  std::size_t released = 0;
  bool fenced = false;
  for (std::size_t i = 0; i < reach_ && idle_host_ != 0; ++i) {
    Slot& s = slots_[i];
    if (idle_kind(s) != Idle::Host || s.moving) continue;  // (a group is never in host memory)
    if (!std::exchange(fenced, true)) source_.before_unmap();
    const std::vector<Chunk> pieces = unmap_slot(i);
    if (pieces.empty()) continue;  // the driver kept it mapped: tried again at the next free
    source_.give_back(pieces);
    ++released;
    ++figures_.released;
  }
  return released;
}

std::size_t CarvedRange::release_idle(std::size_t wanted) {
  std::size_t released = 0;
  if (idle_ == 0) return 0;
  bool fenced = false;
  for (std::size_t i = reach_; i-- > 0 && released < wanted;) {
    const Slot& s = slots_[i];
    if (s.group_index + 1 != s.group_slots) continue;  // a group is looked at once, from its last member
    const std::size_t first = mapping_first(i), n = s.group_slots;
    if (!take_idle(first)) continue;
    if (!std::exchange(fenced, true)) source_.before_unmap();
    const std::vector<Chunk> pieces = unmap_slot(first);
    if (pieces.empty()) {
      keep_mapped(first, n);
      continue;
    }
    source_.give_back(pieces);
    released += n;
    figures_.released += n;
    i = first;
  }
  return released;
}

void CarvedRange::count_use(CUdeviceptr start, std::size_t bytes, bool add) {
  for (CUdeviceptr at = start; at < start + bytes;) {
    const std::size_t i = (at - base_) / extent_;
    const CUdeviceptr end = std::min<CUdeviceptr>(start + bytes, slot_va(i) + extent_);
    Slot& s = slots_[i];
    const Idle was = idle_kind(s);
    if (add) {
      s.used += end - at;
    } else {
      s.used -= end - at;
    }
    recount(i, was);
    at = end;
  }
}

std::vector<Chunk> CarvedRange::pieces_of(CUdeviceptr start, std::size_t bytes, CUdeviceptr* first) const {
  std::vector<Chunk> out;
  const std::size_t from = (start - base_) / extent_, to = (start + bytes - 1 - base_) / extent_;
  std::size_t i = mapping_first(from);
  *first = slot_va(i);
  for (; i <= to; i += slots_[i].group_slots) {
    const std::vector<Chunk> pieces = mapping_pieces(i);
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

void CarvedRange::for_each_mapped(const std::function<void(CUdeviceptr, std::span<const Chunk>)>& visit) const {
  for (std::size_t i = 0; i < slots_.size(); i += slots_[i].group_slots) {
    if (!slots_[i].pieces.empty()) visit(slot_va(i), mapping_pieces(i));
  }
}

CarvedRange::Figures CarvedRange::figures() const {
  Figures f = figures_;
  f.slots_mapped = mapped_;
  f.slots_idle = idle_;
  f.slots_host = host_;
  return f;
}

std::string CarvedRange::check_invariants() const {
  std::string out;
  std::vector<std::uint64_t> used(slots_.size(), 0);
  std::uint64_t live = 0;
  CUdeviceptr last_end = 0;
  for (const auto& [start, bytes] : live_) {
    if (start < last_end) out += fmt::format("allocation at {:#x} overlaps the one before it\n", start);
    last_end = start + bytes;
    live += bytes;
    if (start < base_ || last_end > base_ + slots_.size() * extent_) {
      out += fmt::format("allocation at {:#x} lies outside the range\n", start);
      continue;
    }
    for (CUdeviceptr at = start; at < last_end;) {
      const std::size_t i = (at - base_) / extent_;
      if (slots_[i].pieces.empty()) out += fmt::format("allocation at {:#x} lies in unmapped slot {}\n", start, i);
      const CUdeviceptr end = std::min<CUdeviceptr>(last_end, slot_va(i) + extent_);
      used[i] += end - at;
      at = end;
    }
  }
  std::uint64_t mapped = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const std::size_t first = mapping_first(i);
    if (s.group_slots > 1 && (first + s.group_slots > slots_.size() || slots_[first].group_slots != s.group_slots ||
                              slots_[first].pieces.empty() || s.pieces.empty() ||
                              slots_[first].pieces.front().handle != s.pieces.front().handle))
      out += fmt::format("slot {}: not a member of the group it names\n", i);
    if (used[i] != slots_[i].used) out += fmt::format("slot {}: {} bytes used, counted {}\n", i, used[i], slots_[i].used);
    if (slots_[i].pieces.empty() || slots_[i].retired) continue;  // a retired slot holds nothing, frees nothing
    mapped += extent_;
    if (granules_of(slots_[i].pieces) * chunk_ != extent_) out += fmt::format("slot {}: pieces do not cover it\n", i);
  }
  if (live != figures_.live_bytes) out += fmt::format("live bytes {}, counted {}\n", live, figures_.live_bytes);
  if (live_.size() != figures_.allocations) out += fmt::format("{} allocations, counted {}\n", live_.size(), figures_.allocations);
  std::size_t mapped_slots = 0, host_slots = 0, idle = 0, idle_host = 0;
  for (const Slot& s : slots_) {
    mapped_slots += s.pieces.empty() ? 0 : 1;
    host_slots += s.on_host() ? 1 : 0;
    idle += idle_kind(s) == Idle::Device ? 1 : 0;
    idle_host += idle_kind(s) == Idle::Host ? 1 : 0;
    if (s.group_slots > 1 && (s.pieces.size() != 1 || s.group_index >= s.group_slots))
      out += "a group member's share is not one piece of it\n";
    const auto other_tier = [&s](const Chunk& c) { return c.tier != s.pieces.front().tier; };
    if (!s.pieces.empty() && std::any_of(s.pieces.begin(), s.pieces.end(), other_tier)) out += "a slot's pieces lie in both tiers\n";
  }
  if (host_slots != host_) out += fmt::format("{} slots in host memory, counted {}\n", host_slots, host_);
  if (mapped_slots != mapped_ || idle != idle_ || idle_host != idle_host_)
    out += fmt::format("{} slots mapped, {} idle on the device and {} in host memory, counted {}, {} and {}\n", mapped_slots,
                       idle, idle_host, mapped_, idle_, idle_host_);
  // A slot in host memory withholds its free space (see carved_range.h); a device slot's free space
  // is in its lane's list.
  std::array<std::uint64_t, 2> lane_free{};
  for (const Slot& s : slots_) {
    if (!s.pieces.empty() && !s.on_host() && !s.retired) lane_free[static_cast<std::size_t>(s.lane)] += extent_ - s.used;
  }
  for (const Lane lane : {Lane::Small, Lane::Large}) {
    if (lane_free[static_cast<std::size_t>(lane)] != free_in(lane).free_bytes())
      out += fmt::format("the {} lane's slots have {} bytes free, its list {}\n",
                         lane == Lane::Small ? "small" : "large", lane_free[static_cast<std::size_t>(lane)],
                         free_in(lane).free_bytes());
  }
  const std::uint64_t free = free_in(Lane::Small).free_bytes() + free_in(Lane::Large).free_bytes();
  if (mapped != live + free + withheld_bytes())
    out += fmt::format("mapped {} bytes != live {} + free {} + withheld {}\n", mapped, live, free, withheld_bytes());
  return out;
}

}  // namespace uvmpool::pool
