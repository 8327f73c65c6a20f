// Pieces: allocations cut where launches pass pointers into them, the unit the policy moves with
// UVMPOOL_TIERING_UNIT=piece (docs/tiering.md, "Pieces").
//
// Why: an allocation is often far more than what one launch needs. PyTorch's caching allocator
// carves tensors out of segments of 2 MiB to several GiB, and the policy moving whole allocations
// moved a whole segment for a launch that needed one tensor of it. Replayed on launch sequences
// traced on an H200 (tests/tiering/policy_replay.cpp, Belady on demand, 2026-11-29): a 3B model's
// training step at half its memory (scoreboard row 7) needs 100 GiB a step brought in by
// allocations, 38 GiB by 2 MiB pieces and 50 GiB by 32 MiB ones; GPT-2-medium at a third of its
// memory (row 4b) 40, 26 and 30.
//
// A pointer shows where a tensor starts, never where it ends. So a piece runs from a pointer,
// rounded down to the granule, to the next pointer seen into the same allocation (rounded the same
// way), or to the allocation's end: the pieces of a segment are its tensors once each was passed
// to some launch. The guess fails for a tensor whose middle some launch points into (a view at an
// offset): it is cut in two, and a launch given only its start reads the rest in place (slower,
// never wrong: addresses do not change). A piece grows no cuts past kMaxCuts an allocation.
//
// Not thread-safe: the caller serializes (Tiering calls it under the policy's lock).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "pool/pool.h"

namespace uvmpool::tiering {

class Pieces {
 public:
  static constexpr std::size_t kMaxCuts = 4096;  // per allocation: a bound on memory, far above a segment's tensors
  // The driver's granularity on every GPU measured (../shared/FACTS.md), the pool's chunk by default.
  static constexpr std::uint64_t kGranule = std::uint64_t{2} << 20;
  // `granule`: pointers within one granule start the same piece (the pool moves whole chunks).
  explicit Pieces(std::uint64_t granule) : granule_(granule != 0 ? granule : 1) {}

  struct Piece {
    CUdeviceptr base = 0;
    std::uint64_t bytes = 0;
  };
  // The piece of allocation `a` that `p` (inside it) starts, `p` noted as a cut first.
  Piece cut(const pool::AllocationInfo& a, CUdeviceptr p);
  // Forgets the cuts of allocations `live(base, buffer_id)` says are gone. The caller calls it now
  // and then (a freed allocation's cuts are also dropped when its base comes back in another).
  void prune(const std::function<bool(CUdeviceptr, std::uint64_t)>& live);
  std::size_t allocations() const { return cuts_.size(); }

 private:
  struct Cuts {
    std::uint64_t buffer_id = 0;
    std::vector<std::uint64_t> offsets;  // sorted, each a multiple of the granule
  };
  Piece piece_at(const pool::AllocationInfo& a, const std::vector<std::uint64_t>& offsets, std::uint64_t offset) const;
  const std::uint64_t granule_;
  std::unordered_map<CUdeviceptr, Cuts> cuts_;  // by allocation base
};

}  // namespace uvmpool::tiering
