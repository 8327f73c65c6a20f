// A device's free physical pieces (free_pieces.h).
#include "pool/free_pieces.h"

#include <algorithm>

namespace uvmpool::pool {

void FreePieces::add(const Chunk& piece) {
  if (piece.granules == 1) {
    chunks_.push_back(piece.handle);
  } else if (piece.granules == extent_granules_) {
    extents_.push_back(piece.handle);
  } else {
    runs_.push_back(piece);
    run_granules_ += piece.granules;
  }
}

Handle FreePieces::pop_extent() {
  const Handle h = extents_.back();
  extents_.pop_back();
  return h;
}

Chunk FreePieces::pop_run() {
  const Chunk run = runs_.back();
  runs_.pop_back();
  run_granules_ -= run.granules;
  return run;
}

std::optional<Chunk> FreePieces::take_run(std::size_t granules) {
  const auto it = std::find_if(runs_.begin(), runs_.end(), [&](const Chunk& c) { return c.granules == granules; });
  if (it == runs_.end()) return std::nullopt;
  const Chunk run = *it;
  runs_.erase(it);
  run_granules_ -= granules;
  return run;
}

void FreePieces::pop_chunks(std::size_t n, std::vector<Chunk>* out) {
  for (std::size_t i = chunks_.size() - n; i < chunks_.size(); ++i) out->push_back({chunks_[i], Tier::Device});
  chunks_.resize(chunks_.size() - n);
}

std::vector<Handle> FreePieces::pop_chunk_handles(std::size_t n) {
  std::vector<Handle> taken(chunks_.end() - static_cast<std::ptrdiff_t>(n), chunks_.end());
  chunks_.resize(chunks_.size() - n);
  return taken;
}

FreePieces::All FreePieces::take_all() {
  All all{std::move(chunks_), std::move(extents_), std::move(runs_)};
  chunks_.clear();
  extents_.clear();
  runs_.clear();
  run_granules_ = 0;
  return all;
}

}  // namespace uvmpool::pool
