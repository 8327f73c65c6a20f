// A device's free physical pieces, by shape: one part of a device pool (device_pool.h), guarded as a
// whole by the pool's slow-path lock (the member is UVMPOOL_GUARDED_BY(mu_)).
//
// Chunks (one granule each), extents (UVMPOOL_EXTENT_SIZE each, one handle) and runs (one handle of
// 2 up to half an extent's granules, made for moves and kept for them: the same buffers move every
// step and find their sizes here). The part only holds handles; making, splitting and releasing them
// and the figures that count them (DeviceFigures::chunks_free, extents_held) are the pool's
// (chunks.cpp), and placement decides which are taken (placement.h).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "pool/vmm.h"

namespace uvmpool::pool {

class FreePieces {
 public:
  void set_extent_granules(std::size_t granules) { extent_granules_ = granules; }

  std::size_t granules() const { return chunks_.size() + extents_.size() * extent_granules_ + run_granules_; }
  std::size_t chunks() const { return chunks_.size(); }
  std::size_t extents() const { return extents_.size(); }
  std::size_t runs() const { return runs_.size(); }
  std::size_t multi_chunk_pieces() const { return extents_.size() + runs_.size(); }  // each one handle of several chunks

  void add(const Chunk& piece);  // a device piece, filed by its size
  void add_chunks(std::span<const Handle> handles) { chunks_.insert(chunks_.end(), handles.begin(), handles.end()); }
  void add_extents(std::span<const Handle> handles) { extents_.insert(extents_.end(), handles.begin(), handles.end()); }

  Handle pop_extent();  // callers check extents() first
  Chunk pop_run();      // callers check runs() first
  std::optional<Chunk> take_run(std::size_t granules);  // a free run of exactly that size
  // The last n chunks (callers check chunks() first), appended to `out` as pieces or handed back as handles.
  void pop_chunks(std::size_t n, std::vector<Chunk>* out);
  std::vector<Handle> pop_chunk_handles(std::size_t n);

  // Everything, for release; the part is left empty.
  struct All {
    std::vector<Handle> chunks, extents;
    std::vector<Chunk> runs;
  };
  All take_all();

 private:
  std::size_t extent_granules_ = 0;
  std::vector<Handle> chunks_;
  std::vector<Handle> extents_;
  std::vector<Chunk> runs_;
  std::size_t run_granules_ = 0;
};

}  // namespace uvmpool::pool
