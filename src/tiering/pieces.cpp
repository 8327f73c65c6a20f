#include "tiering/pieces.h"

#include <algorithm>

namespace uvmpool::tiering {

Pieces::Piece Pieces::piece_at(const pool::AllocationInfo& a, const std::vector<std::uint64_t>& offsets,
                               std::uint64_t offset) const {
  // From the last cut at or before `offset` (the allocation's start when none) to the next cut.
  const auto next = std::upper_bound(offsets.begin(), offsets.end(), offset);
  const std::uint64_t from = next == offsets.begin() ? 0 : *std::prev(next);
  const std::uint64_t to = next == offsets.end() ? a.size : std::min<std::uint64_t>(*next, a.size);
  return {a.base + from, to > from ? to - from : 0};
}

Pieces::Piece Pieces::cut(const pool::AllocationInfo& a, CUdeviceptr p) {
  if (p < a.base || p - a.base >= a.size) return {a.base, a.size};  // not inside: the whole allocation
  Cuts& c = cuts_[a.base];
  if (c.buffer_id != a.buffer_id) c = Cuts{a.buffer_id, {}};  // the base came back in another allocation
  const std::uint64_t offset = (p - a.base) / granule_ * granule_;
  const auto at = std::lower_bound(c.offsets.begin(), c.offsets.end(), offset);
  if ((at == c.offsets.end() || *at != offset) && c.offsets.size() < kMaxCuts) c.offsets.insert(at, offset);
  return piece_at(a, c.offsets, offset);
}

void Pieces::prune(const std::function<bool(CUdeviceptr, std::uint64_t)>& live) {
  std::erase_if(cuts_, [&](const auto& entry) { return !live(entry.first, entry.second.buffer_id); });
}

}  // namespace uvmpool::tiering
