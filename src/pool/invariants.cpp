// The pool's bookkeeping, checked against its structures (DevicePool::check_invariants): every counter the
// budget and the statistics read is recomputed here from the free lists, the descriptors and the
// bins, and a difference is reported. Tests call it between operations, with no other thread in the
// pool: the counters are relaxed atomics updated outside the locks, so only a quiescent pool adds up.
// It is what keeps per-tier figures exact as mappings are cut, joined, shrunk, spilled and (with
// tiering) moved.
#include <string>

#include "pool/device_pool.h"

namespace uvmpool::pool {
namespace {

void expect_equal(std::string& out, const char* what, std::uint64_t counter, std::uint64_t recomputed) {
  if (counter == recomputed) return;
  out += what;
  out += ": counter " + std::to_string(counter) + ", recomputed " + std::to_string(recomputed) + "\n";
}

}  // namespace

// Quiescent only (see above): it reads guarded fields under their locks but the analysis cannot see
// the bins' and classes' locks taken in a loop.
// The address map's host marks of one piece mapped at `at` against the piece's tier (the launch hooks
// read the marks).
void DevicePool::check_marks(std::string& out, CUdeviceptr at, const Chunk& c) const {
  for (std::uint32_t g = 0; g < c.granules; ++g) {
    const CUdeviceptr p = at + g * chunk_;
    if (map_.probe(p).host != (c.tier == Tier::Host))
      out += "the address map marks " + std::to_string(p) + (c.tier == Tier::Host ? " device" : " host") +
             " memory, its piece is the other tier\n";
  }
}

std::string DevicePool::check_invariants() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
  std::string out;
  MutexLock lock(mu_);
  expect_equal(out, "chunks_free (granules in free chunks and extents)", fig_.chunks_free.load(), free_granules());

  std::uint64_t device_granules = 0, host_granules = 0, extents = free_.multi_chunk_pieces();
  std::uint64_t cached_device = 0, live = 0, live_host = 0;
  for (const Block* b : all_blocks_) {
    const int state = base_state(b->state.load());
    if (state == kDead) continue;
    std::size_t granules = 0, host = 0;
    for (const Chunk& c : b->chunks) {
      check_marks(out, b->base + granules * chunk_, c);
      granules += c.granules;
      if (c.tier == Tier::Host) {
        host += c.granules;
      } else if (c.granules > 1) {
        ++extents;
      }
    }
    if (granules != b->granules) out += "a mapping's pieces add up to " + std::to_string(granules) + " granules, it says " + std::to_string(b->granules) + "\n";
    if (host != b->host_chunks) out += "a mapping's host pieces add up to " + std::to_string(host) + " granules, it says " + std::to_string(b->host_chunks) + "\n";
    device_granules += granules - host;
    host_granules += host;
    if (state == kCached) cached_device += granules - host;
    if (state == kLive) {
      const std::size_t bytes = b->size.load();
      live += bytes;
      if (b->host_chunks != 0) live_host += host_bytes_of(b, bytes, chunk_);
    }
  }
  for (const Slab* s : all_slabs_) {
    if (s->state.load() == kDead) continue;
    (s->chunk.tier == Tier::Host ? host_granules : device_granules) += 1;
    check_marks(out, s->base, s->chunk);
    std::uint32_t used = 0;
    for (std::uint32_t i = 0; i < s->slots; ++i) {
      if ((s->live[i / 64] >> (i % 64) & 1) == 0) continue;
      ++used;
      if (s->info[i].pending) continue;
      live += s->info[i].size;
      if (s->chunk.tier == Tier::Host) live_host += s->info[i].size;
    }
    if (used != s->used) out += "a slab's used slots: " + std::to_string(s->used) + ", its bitmap has " + std::to_string(used) + "\n";
    if (used == 0 && s->chunk.tier == Tier::Device) ++cached_device;
  }
  check_carved(out, &device_granules, &host_granules, &extents, &live, &live_host);
  expect_equal(out, "chunks_held (device granules held)", fig_.chunks_held.load(), free_granules() + device_granules);
  expect_equal(out, "extents_held", fig_.extents_held.load(), extents);
  expect_equal(out, "host chunks in mappings", fig_.host_mapped.load(), host_granules);
  expect_equal(out, "chunks_cached (device granules in cached mappings and empty slabs)", fig_.chunks_cached.load(), cached_device);
  expect_equal(out, "live_bytes", fig_.live_bytes.load(), live);
  expect_equal(out, "live_host_bytes", fig_.live_host_bytes.load(), live_host);

  out += cache_.check();
  return out;
}

}  // namespace uvmpool::pool
