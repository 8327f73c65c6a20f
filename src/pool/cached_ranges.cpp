// Cached mappings cut and joined by bookkeeping alone. Every piece of a stitched mapping (a chunk or
// an extent) is its own cuMemMap, so a cached mapping can be cut at any piece boundary, and two cached
// mappings that meet in address space joined into one, with no driver call: only descriptors and the
// address map change.
// A request whose size no bin holds is served this way before any mapping is taken apart (about
// 17 us per chunk to unmap and 24 us to map again and set access, on an H200) or the pool grows.
#include <algorithm>
#include <span>

#include "pool/device_pool.h"

namespace uvmpool::pool {
namespace {

// Where a window of mappings is cut to leave at least `granules` at its front: the index of the first
// piece past the cut in the joined list. A cut that would fall inside an extent moves to its end, so
// the front may hold up to an extent's worth more than asked (*front: how much it holds).
std::size_t cut_index(std::span<Block* const> window, std::size_t granules, std::size_t* front) {
  std::size_t at = 0, index = 0;
  for (const Block* b : window) {
    for (const Chunk& c : b->chunks) {
      if (at >= granules) {
        *front = at;
        return index;
      }
      at += c.granules;
      ++index;
    }
  }
  *front = at;
  return index;
}

}  // namespace

Block* DevicePool::carve_cached(std::size_t granules) {
  if (fig_.chunks_cached.load(std::memory_order_relaxed) < granules) return nullptr;
  // The cached device mappings, in address order. Their sizes change only under mu_ (held), so what
  // is read here stays true but for one thing: a fast-path allocation may take one meanwhile, which
  // MappingCache::unbin tells.
  std::vector<Block*> cached = cache_.device_mappings();
  if (cached.empty()) return nullptr;
  std::sort(cached.begin(), cached.end(), [](const Block* a, const Block* b) { return a->base < b->base; });

  // The best window: consecutive mappings, each meeting the next in one region (a mapping may not
  // cross a reservation), that cover the request with the least excess (then the fewest pieces), and
  // whose cut, moved to the end of an extent it would fall in, adds little (within_rounding).
  std::size_t best_first = 0, best_count = 0, best_total = SIZE_MAX;
  std::size_t run_start = 0;
  for (std::size_t i = 0; i < cached.size(); ++i) {
    const bool meets = i > 0 && cached[i - 1]->base + cached[i - 1]->granules * chunk_ == cached[i]->base &&
                       !ranges_.starts_region(cached[i]->base);
    if (!meets) run_start = i;
    // The shortest window ending at i that covers the request.
    std::size_t total = 0, first = i + 1;
    while (first > run_start && total < granules) total += cached[--first]->granules;
    if (total < granules) continue;
    const std::size_t count = i - first + 1;
    std::size_t front = 0;
    cut_index(std::span<Block* const>(cached).subspan(first, count), granules, &front);
    if (!within_rounding(front, granules)) continue;  // the cut would round up too far

    if (total < best_total || (total == best_total && count < best_count)) {
      best_first = first;
      best_count = count;
      best_total = total;
    }
    if (best_total == granules && best_count == 1) break;
  }
  if (best_count == 0) return nullptr;

  std::vector<Block*> window(cached.begin() + static_cast<std::ptrdiff_t>(best_first),
                             cached.begin() + static_cast<std::ptrdiff_t>(best_first + best_count));
  std::size_t front = 0;
  const std::size_t cut = cut_index(window, granules, &front);
  for (std::size_t i = 0; i < window.size(); ++i) {
    if (!cache_.unbin(window[i])) {  // taken meanwhile: what was already out goes back, and the slow path goes on
      for (std::size_t j = 0; j < i; ++j) cache_block(window[j]);
      return nullptr;
    }
    fig_.chunks_cached.fetch_sub(window[i]->granules, std::memory_order_relaxed);
  }

  // Join: the first descriptor takes the others' chunks; theirs are recycled (a lookup that still
  // finds one sees it Dead: not a live allocation, as the range is not).
  Block* joined = window.front();
  for (std::size_t i = 1; i < window.size(); ++i) {
    Block* other = window[i];
    joined->chunks.insert(joined->chunks.end(), other->chunks.begin(), other->chunks.end());
    joined->freed_at.store(kNeverFreed, std::memory_order_relaxed);  // not told apart: copied if moved
    other->chunks.clear();
    other->granules = 0;
    other->state.store(kDead, std::memory_order_release);
    spare_blocks_.push_back(other);
  }
  joined->granules = best_total;
  // Split: the excess past the request (past the extent the request ends in) stays a cached mapping
  // of its own.
  if (joined->granules > front) {
    std::vector<Chunk> rest(joined->chunks.begin() + static_cast<std::ptrdiff_t>(cut), joined->chunks.end());
    joined->chunks.resize(cut);
    joined->granules = front;
    Block* tail = make_block(joined->base + front * chunk_, std::move(rest));
    cache_block(tail);
  }
  map_.set(joined->base, joined->granules * chunk_, reinterpret_cast<Entry>(joined));
  if (best_count > 1 || best_total > granules) fig_.cut_or_joined.fetch_add(1, std::memory_order_relaxed);
  return joined;
}

}  // namespace uvmpool::pool
