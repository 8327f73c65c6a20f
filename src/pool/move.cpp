// Moves: pieces of pool memory changing tier (device <-> pinned host) at the same addresses, so every
// pointer the program holds stays valid. Tiering (promotion ahead of kernels, demotion of cold
// memory) is built on this; deciding when a move is safe against the program's own work is not
// the pool's (the caller orders it; the pool only keeps its own structures and figures right).
//
// The steps, which the caller sequences (Pool::prepare_move says what each answers):
//   1. prepare: claim the owner (a mapping: live, cached or freed on a stream; or a slab), take
//      target pieces in the other tier for the same granules, each with its staging mapping (one
//      handle may be mapped at two addresses; Vmm::staging keeps a piece's from its first move until
//      the piece is released, so a buffer moving back and forth maps nothing here after its first
//      round trip). Refused, nothing is held.
//   2. copy: cuMemcpyDtoDAsync from the pieces to the staging mappings, on the caller's stream
//      (a copy engine's), which the caller waits for.
//   3. commit: unmap the old pieces, map the new ones at the same address and set access
//      (Vmm::remap, all or nothing: failing, the old mapping is restored and the move stays
//      prepared); the old pieces go back to their tier (with their staging mappings, if any), and
//      swap_pieces updates the descriptor and every figure.
//   abort (instead of 3): the target goes back; the old mapping was never touched.
//
// Piece shapes: the target is whole extents while they fit, chunks for the rest, in either tier (on
// the host, extents are made for moves only: HostReserve::take_extents), so a remap costs one
// mapping per extent rather than per chunk. The mapping's piece boundaries change accordingly; only
// the range moved is remapped.
//
// The claim. A mapping's state gains kMoving: a Live or Pending one by compare-and-swap; a Cached one
// is first taken out of its bin (withdraw_cached, under mu_, which every other taker of cached
// mappings holds but the bins' fast path, which withdraw_cached loses to cleanly). Several moves of
// one mapping may be in flight over disjoint ranges (a large tensor moves as many extents, pipelined):
// Block::moving lists their ranges, the first claims, the last releases, and a commit finds its
// pieces again by address, since a commit before it may have split an extent into chunks. While claimed:
//   - no free waits for the move, as tiering's moves may stand until the program's work reaches a
//     hold: a mapping's, under mu_ (free_while_moving), becomes Pending | kMoving (cuMemFreeAsync),
//     Quarantined | kMoving (cuMemFreeAsync in a capture: the move ends, and no later one begins) or
//     Cached | kMoving (cuMemFree), which end_move bins; a slab's slot is freed as any (under its class
//     lock, which the commit changes the slab's tier under), and the slab is listed again at the end;
//   - a mapping freed on a stream whose work completes becomes Cached | kMoving, and end_move bins it;
//   - stream-ordered reuse and exporting to CUDA IPC skip or wait for it; but a stream-ordered
//     allocation at its place (repeat_places.h) takes a freed mapping there while it moves (Cached,
//     or Pending on its own stream), published under mu_: the move goes on with a live mapping, and
//     end_move bins only a Cached one.
// A slab's claim is its `moving` flag under its class lock; it leaves its class's list, so no slot is
// handed out from it (but a slot freed on a stream, taken back on that stream), and no free of its
// slots gives it back to the pool. Memory exported by CUDA IPC never moves: another
// process maps its handles.
//
// Figures: cached figures are withdrawn with the mapping and added back by cache_block when it is
// binned again, from its new pieces; everything else a move changes (host chunks mapped, live bytes
// in host memory and their peaks, bytes moved) changes in swap_pieces, from the pieces themselves, so
// check_invariants keeps adding up after any sequence of moves and frees.
//
// Locks: mu_ across prepare, commit and abort (the descriptors' pieces change only under it), then a
// bin, class or mapping cache lock inside, as everywhere in the pool; move_mu_ (a leaf) only to wait.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "config/log.h"
#include "driver/context_scope.h"
#include "pool/device_pool.h"
#include "pool/placement.h"
#include "pool/stock.h"

namespace uvmpool::pool {
namespace {

std::uint64_t nanoseconds(std::chrono::steady_clock::duration d) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace

CUresult DevicePool::prepare_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* m, MoveWaits waits) {
  // Guard mode unmaps every free at once and keeps each allocation its own mapping: not worth moving.
  if (config_.guard || (to == Tier::Host && !host_)) return CUDA_ERROR_NOT_SUPPORTED;
  MutexLock lock(mu_);
  const Entry e = map_.lookup(p);  // again, under mu_: mappings are cut and joined only under it
  if (as_carved(e) == this) return prepare_carved_move(p, bytes, to, m, waits);  // a slot, whole (carved_moves.cpp)
  Block* b = as_block(e);
  Slab* s = as_slab(e);
  if (e == 0 || (b != nullptr && b->owner != this) || (s != nullptr && s->owner != this)) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = b != nullptr ? claim_block(b) : claim_slab(s); r != CUDA_SUCCESS) return r;
  const std::span<const Chunk> pieces = b != nullptr ? std::span<const Chunk>(b->chunks) : std::span<const Chunk>(&s->chunk, 1);
  const CUdeviceptr base = b != nullptr ? b->base : s->base;
  const CUdeviceptr end = base + granules_of(pieces) * chunk_;
  const auto refuse = [&](CUresult r) UVMPOOL_REQUIRES(mu_) {
    end_move(e);
    *m = Move{};
    return r;
  };
  if (bytes > end - p) return refuse(CUDA_ERROR_INVALID_VALUE);  // past the mapping: not one allocation

  // The pieces that hold any of [p, p + bytes).
  std::size_t first = pieces.size(), count = 0;
  CUdeviceptr at = base, from = 0;
  for (std::size_t i = 0; i < pieces.size() && at < p + bytes; ++i) {
    const CUdeviceptr next = at + pieces[i].granules * chunk_;
    if (next > p) {
      if (first == pieces.size()) {
        first = i;
        from = at;
      }
      ++count;
    }
    at = next;
  }
  const std::span<const Chunk> moving = pieces.subspan(first, count);  // count > 0: p lies in the mapping
  const Tier tier = moving.front().tier;
  if (std::any_of(moving.begin(), moving.end(), [tier](const Chunk& c) { return c.tier != tier; })) {
    return refuse(CUDA_ERROR_INVALID_VALUE);  // both tiers: the caller moves one run at a time
  }
  m->address = from;
  m->bytes = static_cast<std::size_t>(at - from);
  m->to = to;
  m->device = device_;
  if (b != nullptr && std::any_of(b->moving.begin(), b->moving.end(), [&](const auto& range) {
        return range.first < from + m->bytes && from < range.first + range.second;
      })) {
    return refuse(CUDA_ERROR_NOT_READY);  // those pieces are moving already
  }
  if (tier == to) {  // already there: nothing to do, nothing held
    end_move(e);
    return CUDA_SUCCESS;
  }
  m->owner = e;
  // Some pieces in this tier moving, others staying: a part promotion (the thrash guard's).
  for (std::size_t i = 0; b != nullptr && i < pieces.size(); ++i) {
    if ((i < first || i >= first + count) && pieces[i].tier == tier) b->moved_in_part = true;
  }
  const HostShape shape = b == nullptr || b->moved_in_part ? HostShape::Fine : HostShape::Partable;
  if (const CUresult r = take_staged_target(m, waits, shape); r != CUDA_SUCCESS) return refuse(r);
  if (b != nullptr) b->moving.emplace_back(m->address, m->bytes);
  fig_.moves_in_flight.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult DevicePool::take_staged_target(Move* m, MoveWaits waits, HostShape shape) {
  CUresult r = take_target(m->bytes / chunk_, m->to, &m->target, waits, shape);
  m->staged.clear();
  m->chunk_size = chunk_;
  for (std::size_t i = 0; r == CUDA_SUCCESS && i < m->target.size(); ++i) {
    CUdeviceptr va = 0;
    r = vmm_.staging(m->target[i], chunk_, &va);  // kept from an earlier move of the piece, or made now
    m->staged.push_back(va);
  }
  if (r != CUDA_SUCCESS) {
    m->staged.clear();
    return_chunks(m->target);  // with the staging mappings made: the next move of those pieces uses them
    m->target.clear();
    fig_.moves_failed.fetch_add(1, std::memory_order_relaxed);
    // What the room was made of (promotion_room counts the same parts), so a refusal the policy did
    // not expect says which part fell short: idle memory needs a fence first when a synchronous free
    // came since the last (fence due), which a move that may not wait leaves alone.
    // (Loads only: the line's arguments are made whether or not debug is on.)
    log::debug("device {}: a move of {} bytes at {:#x} to the {} tier refused ({}; chunks free {}, cached {}, idle "
               "carved {}; room last told {} MiB; fence {})",
               device_, m->bytes, m->address, m->to == Tier::Host ? "host" : "device", static_cast<int>(r),
               free_granules(), fig_.chunks_cached.load(std::memory_order_relaxed),
               fig_.carved_idle.load(std::memory_order_relaxed), last_room_.load(std::memory_order_relaxed) >> 20,
               fence_due() ? (waits == MoveWaits::Allowed ? "due, may wait" : "due, no wait") : "not due");
    return r;
  }
  m->staging = m->staged.front();
  return CUDA_SUCCESS;
}

std::vector<Chunk> DevicePool::owner_pieces(const Move& m, CUdeviceptr* base) {
  if (as_carved(m.owner) != nullptr) {
    const std::size_t slot = *carve_range_->slot_of(m.address);  // claimed: mapped until the move ends
    *base = carve_range_->slot_start(slot);
    return carve_range_->mapping_pieces(slot);  // the move's address is its mapping's first slot
  }
  if (Block* b = as_block(m.owner)) {
    *base = b->base;
    return b->chunks;
  }
  Slab* s = as_slab(m.owner);
  *base = s->base;
  return {s->chunk};
}

CUresult DevicePool::copy_move(Move& m, CUstream stream, std::uint64_t frees_before) {
  // Freed before the caller's point in stream order, and not allocated again (Pending or Cached now:
  // an allocation taking it from here on is behind the point, its work after the commit): no work
  // may read its bytes. A prepare cannot tell this alone: with a hold placed before it, work queued
  // behind the hold may still read a mapping that a synchronous free cached meanwhile.
  if (const Block* b = as_block(m.owner); b != nullptr && frees_before != 0) {
    const int state = base_state(b->state.load(std::memory_order_acquire));
    if ((state == kPending || state == kCached) && b->freed_at.load(std::memory_order_relaxed) < frees_before) {
      m.uncopied = true;
      return CUDA_SUCCESS;
    }
  }
  // One copy per new piece, each to its staging mapping; adjacent ones in one where their staging
  // mappings happen to be adjacent too.
  CUdeviceptr from = m.address, to = 0;
  std::size_t run = 0;
  for (std::size_t i = 0; i <= m.target.size(); ++i) {
    const std::size_t bytes = i < m.target.size() ? m.target[i].granules * chunk_ : 0;
    if (i < m.target.size() && run != 0 && m.staged[i] == to + run) {
      run += bytes;
      continue;
    }
    if (run != 0) {
      if (const CUresult r = d_.cuMemcpyDtoDAsync_v2(to, from, run, stream); r != CUDA_SUCCESS) return r;
      from += run;
    }
    if (i < m.target.size()) {
      to = m.staged[i];
      run = bytes;
    }
  }
  return CUDA_SUCCESS;
}

CUresult DevicePool::commit_move(Move* m) {
  MutexLock lock(mu_);
  return commit_locked(m, false);
}

void DevicePool::abort_move(Move* m) {
  MutexLock lock(mu_);
  abort_locked(m);
}

void DevicePool::commit_quiesced(std::span<Move* const> moves, const Quiesce& quiesce, std::span<CUresult> results,
                                 const CopyReady& ready) {
  MutexLock lock(mu_);
  // Nothing below waits for the program's work (a quiesced commit skips fence_move, and no other step
  // of a commit or abort waits; `ready` waits only for the caller's own copies): once `quiesce` holds
  // the program's streams, a wait for them would never end. mu_ stays held so that no thread of this
  // pool is inside such a wait meanwhile.
  std::vector<char> commit(moves.size(), 0);
  bool go_on = quiesce(std::span<char>(commit));
  for (std::size_t i = 0; i < moves.size(); ++i) {
    Move* m = moves[i];
    if (m->staging == 0) {
      results[i] = CUDA_SUCCESS;  // nothing was to move
      continue;
    }
    const bool now = go_on && commit[i] != 0 && (!ready || (go_on = ready(i)));
    results[i] = now ? commit_locked(m, true) : CUDA_ERROR_NOT_READY;
    if (results[i] != CUDA_SUCCESS) abort_locked(m, true);
  }
}

std::uint64_t DevicePool::promotion_room() {
  // What take_target(Device) can take: free chunks, cached mappings and empty slabs taken apart, and
  // growth within the budget (as the driver's free memory allows). Asked on launching threads: while
  // mu_ is busy (a mover's commit holds it across its copies and remaps) the last answer
  // stands in, so a launch never waits for a move.
  if (!mu_.try_lock()) return last_room_.load(std::memory_order_relaxed);
  const std::uint64_t room = (free_granules() + fig_.chunks_cached.load(std::memory_order_relaxed) +
                              fig_.carved_idle.load(std::memory_order_relaxed) + growable_chunks()) *
                             chunk_;
  mu_.unlock();
  last_room_.store(room, std::memory_order_relaxed);
  return room;
}

std::optional<CUdeviceptr> DevicePool::promotable_end(CUdeviceptr from, std::uint64_t room) {
  if (!mu_.try_lock()) return std::nullopt;  // a launching thread asks: it never waits for a commit
  const Block* b = as_block(map_.lookup(from));
  CUdeviceptr end = from;
  if (b != nullptr && b->owner == this) {
    // From the piece `from` lies in (a move of [from, end) moves it whole) to the last that fits.
    std::uint64_t left = room / chunk_;
    CUdeviceptr at = b->base;
    for (const Chunk& c : b->chunks) {
      const CUdeviceptr next = at + c.granules * chunk_;
      if (next > from) {
        if (c.tier == Tier::Host) {
          if (c.granules > left) break;
          left -= c.granules;
        }
        end = next;
      }
      at = next;
    }
  }
  mu_.unlock();
  return end;
}

std::optional<std::pair<CUdeviceptr, CUdeviceptr>> DevicePool::whole_pieces(CUdeviceptr from, CUdeviceptr end) {
  if (!mu_.try_lock()) return std::nullopt;  // a launching thread asks: it never waits for a commit
  const Entry e = map_.lookup(from);
  const Block* b = as_block(e);
  std::pair<CUdeviceptr, CUdeviceptr> span{from, end};
  if (as_carved(e) == this && end > from) {  // carved memory moves whole slots, a group's all at once
    span = {carved_slot_end(from) - carved_slot_bytes(), carved_slot_end(end - 1)};
    const std::optional<std::size_t> first = carve_range_->slot_of(from), last = carve_range_->slot_of(end - 1);
    if (first && last) {
      const std::size_t lo = carve_range_->mapping_first(*first), hi = carve_range_->mapping_first(*last);
      span = {carve_range_->slot_start(lo), carve_range_->slot_start(hi + carve_range_->mapping_slots(hi))};
    }
  }
  if (b != nullptr && b->owner == this) {
    CUdeviceptr at = b->base;
    for (const Chunk& c : b->chunks) {
      const CUdeviceptr next = at + c.granules * chunk_;
      if (at <= from && from < next) span.first = at;
      if (at < end && end <= next) span.second = next;
      if (next >= end) break;
      at = next;
    }
  }
  mu_.unlock();
  return span;
}

CUresult DevicePool::commit_locked(Move* m, bool quiesced) {
  // The pieces at the move's range, found again: other moves of the same mapping (of other ranges)
  // may have changed the pieces before them since.
  CUdeviceptr at = 0;
  const std::vector<Chunk> pieces = owner_pieces(*m, &at);
  std::size_t first = 0, count = 0;
  while (at < m->address) at += pieces[first++].granules * chunk_;
  while (at < m->address + m->bytes) at += pieces[first + count++].granules * chunk_;
  const std::vector<Chunk> old(pieces.begin() + static_cast<std::ptrdiff_t>(first),
                               pieces.begin() + static_cast<std::ptrdiff_t>(first + count));
  if (!quiesced)
    if (const CUresult fenced = fence_move(*m); fenced != CUDA_SUCCESS) return fenced;  // still prepared
  // The commit's time, and of it the driver's calls: under a hold the program's work waits for both,
  // and what is not the driver's is the pool's own bookkeeping (DeviceStats::move_commit_us).
  const auto began = std::chrono::steady_clock::now();
  RemapTimes calls;
  const CUresult remapped = vmm_.remap(m->address, old, m->target, chunk_, &calls);
  const auto driver_done = std::chrono::steady_clock::now();
  fig_.move_remap_ns.fetch_add(nanoseconds(driver_done - began), std::memory_order_relaxed);
  for (std::size_t t = 0; t < 2; ++t) {
    fig_.move_unmap_ns[t].fetch_add(calls.unmap_ns[t], std::memory_order_relaxed);
    fig_.move_map_ns[t].fetch_add(calls.map_ns[t], std::memory_order_relaxed);
    fig_.move_access_ns[t].fetch_add(calls.access_ns[t], std::memory_order_relaxed);
  }
  if (remapped != CUDA_SUCCESS) {
    fig_.moves_failed.fetch_add(1, std::memory_order_relaxed);
    log::warn("device {}: a move of {} bytes at {:#x} failed at its remap ({}); the old mapping stands", device_,
              m->bytes, m->address, static_cast<int>(remapped));
    return remapped;  // still prepared: commit again or abort
  }
  fig_.move_unmapped.fetch_add(old.size(), std::memory_order_relaxed);
  fig_.move_mapped.fetch_add(m->target.size(), std::memory_order_relaxed);
  swap_pieces(*m, first, old);
  return_chunks(old);
  forget_range(*m);
  end_move(m->owner);
  release_emptied_slot(*m, quiesced);
  fig_.moves_in_flight.fetch_sub(1, std::memory_order_relaxed);
  fig_.moves.fetch_add(1, std::memory_order_relaxed);
  m->staging = 0;
  m->uncopied = false;
  m->staged.clear();
  m->target.clear();
  fig_.move_commit_ns.fetch_add(nanoseconds(std::chrono::steady_clock::now() - began), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

void DevicePool::abort_locked(Move* m, bool quiesced) {
  return_chunks(m->target);  // their staging mappings stay with them
  forget_range(*m);
  end_move(m->owner);
  release_emptied_slot(*m, quiesced);
  fig_.moves_in_flight.fetch_sub(1, std::memory_order_relaxed);
  m->staging = 0;
  m->uncopied = false;
  m->staged.clear();
  m->target.clear();
}

CUresult DevicePool::claim_block(Block* b) {
  for (int state = b->state.load(std::memory_order_acquire);;) {
    // Moves of other ranges of it are under way: this one joins their claim (prepare_move checks that
    // the ranges do not overlap). kMoving is set and cleared only under mu_, held here.
    if ((state & kMoving) != 0) return base_state(state) == kQuarantined ? CUDA_ERROR_NOT_PERMITTED : CUDA_SUCCESS;
    if (state == kLive || state == kPending) {
      if (!b->state.compare_exchange_weak(state, state | kMoving, std::memory_order_acq_rel)) continue;
    } else if (state == kCached) {
      if (!withdraw_cached(b)) return CUDA_ERROR_NOT_READY;  // an allocation is taking it
      b->state.store(kCached | kMoving, std::memory_order_release);
    } else if (state == kQuarantined) {
      return CUDA_ERROR_NOT_PERMITTED;  // freed in a graph capture: the graph may run it, never remapped
    } else {
      return CUDA_ERROR_NOT_READY;  // being built or published (Dead until then), or freed (kFreeing)
    }
    break;
  }
  if (b->exported) {
    end_move(reinterpret_cast<Entry>(b));
    return CUDA_ERROR_NOT_PERMITTED;
  }
  return CUDA_SUCCESS;
}

CUresult DevicePool::claim_slab(Slab* s) {
  SlabClasses::Class& c = slabs_->of(s);  // fixed while mu_ is held: only new_slab changes it
  MutexLock lock(c.mu);
  if (s->state.load(std::memory_order_relaxed) != kLive) return CUDA_ERROR_NOT_READY;
  if (s->moving.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_READY;
  if (s->exported) return CUDA_ERROR_NOT_PERMITTED;
  slabs_->claim(c, s);
  return CUDA_SUCCESS;
}

void DevicePool::release_emptied_slot(const Move& m, bool quiesced) {
  // A carved slot whose last allocation was freed while it moved (a free keeps a claimed slot) may now
  // lie in host memory holding nothing; the frees that give such slots back had passed it by. Given
  // back now, unless under a hold: unmapping waits for the device first (fence_unmap), which a hold
  // would keep from ending. Then the next carved free, or placement short of host memory
  // (PoolStock::reclaim), gives it back.
  if (!quiesced && as_carved(m.owner) != nullptr) release_idle_host_slots();
}

void DevicePool::end_move(Entry owner) {
  if (as_carved(owner) != nullptr) {
    // The slot's claim ended with its range (forget_range).
  } else if (Slab* s = as_slab(owner)) {
    SlabClasses::Class& c = slabs_->of(s);
    MutexLock lock(c.mu);
    slabs_->unclaim(c, s);
  } else {
    Block* b = as_block(owner);
    if (!b->moving.empty()) return;  // other moves of it go on: the claim stays
    int state = b->state.load(std::memory_order_acquire);
    while (!b->state.compare_exchange_weak(state, state & ~kMoving, std::memory_order_acq_rel)) {
    }
    if (base_state(state) == kCached) cache_block(b);  // withdrawn, or freed (cuMemFree, or on a stream) meanwhile
  }
  { MutexLock lock(move_mu_); }  // a waiter has either seen the claim gone or is waiting: wake it
  move_cv_.notify_all();
}

bool DevicePool::withdraw_cached(Block* b) {
  if (b->host_chunks == 0) {
    if (!cache_.unbin(b)) return false;
    fig_.chunks_cached.fetch_sub(b->granules, std::memory_order_relaxed);
    return true;
  }
  if (!cache_.withdraw_with_host(b)) return false;
  if (b->host_run()) {
    host_->premapped(-static_cast<std::ptrdiff_t>(b->granules));
  } else {
    fig_.host_cached.fetch_sub(b->host_chunks, std::memory_order_relaxed);
    fig_.chunks_cached.fetch_sub(b->granules - b->host_chunks, std::memory_order_relaxed);
  }
  return true;
}

CUresult DevicePool::take_target(std::size_t n, Tier tier, std::vector<Chunk>* out, MoveWaits waits, HostShape host_shape) {
  out->clear();
  // Taking idle mappings apart (device or host) fences first when a synchronous free came since the
  // last fence: with NoWait those are left for a program thread's next allocation to take.
  const bool may_evict = waits == MoveWaits::Allowed || !fence_due();
  if (tier == Tier::Device) {
    // Where placement puts a promotion (placement.h), in runs of the size's binary digits.
    PoolStock stock(*this, out, /*runs=*/true);
    const placement::Ask ask{placement::Purpose::Promotion, n, host_ != nullptr, may_evict};
    return placement::place(stock, ask).refused ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  }
  // Host pieces: each costs one mapping at the commit, and a host mapping's cuMemSetAccess and
  // cuMemUnmap cost about 61 and 31 us a call besides their cost per byte (H200; row 4b: 20.6 and 7.4
  // us a MiB, docs/tiering.md "Where the commits' time goes"), so a range is cut into few pieces.
  // (Fewer still, one piece below an extent, measured no faster on row 4b: the bytes dominate.)
  // Host extents (HostReserve::take_extents) are pinned for moves only, so their sizes follow what
  // moves: the same buffers moving each step find their sizes in the stock. The shape, in address
  // order, smallest first, so that a promotion of the range's start, which is what the room for part
  // of it takes (Pool::promotable_end), finds small pieces there:
  //   - a range of an extent or more: whole extents while n holds one, then halves, quarters and so
  //     on down to two chunks (n's binary digits), the chunk for what is left, laid out the chunk,
  //     then 4, 8, 32 MiB (a demoted 44 MiB is three host pieces, not one and six chunks). A mapping
  //     that may be promoted in part (`Partable`: not a carved slot, which moves whole) whose smallest
  //     piece would be a whole extent has that extent in two halves, one mapping more: else a room of
  //     half an extent fits no piece of it (modeled decoding of 32 MiB weights, 496 MiB of device
  //     memory: 15 weights and 16 MiB left idle, 1.27 of the floor; first-come splits one weight);
  //   - a smaller one: two chunks, then pieces doubling (1, 1, 2, 4 chunks for 16 MiB), then the
  //     rest's binary digits. On the H200 GPT-2-medium's step moved mostly 12 to 20 MiB segments; in
  //     chunks that was 12 mappings a move and remapping took a third of the step. Not one piece:
  //     the room left for part of a buffer (the thrash guard's, which reads the rest in place) would
  //     go unused for want of a piece that fits it (`ThrashGuard_.WeightsReadOnce...`: 8 MiB weights
  //     as single host extents left it 15% slower than the guard fixed on, modeled); with doubling
  //     pieces the part ends within a factor of two of the room;
  //   - a smaller one of a mapping moved in part before (`Fine`, Block::moved_in_part): chunks, so
  //     the next part may end at any granule.
  std::vector<std::uint32_t> shape;  // host extents' granules, in address order after the chunks
  std::size_t rest = n;
  if (n >= extent_granules_) {
    for (std::size_t g = extent_granules_; g >= 2; g /= 2) {
      for (; rest >= g; rest -= g) shape.push_back(static_cast<std::uint32_t>(g));
    }
    std::reverse(shape.begin(), shape.end());
    if (host_shape == HostShape::Partable && rest == 0 && shape.front() == extent_granules_) {
      shape.front() /= 2;
      shape.insert(shape.begin(), shape.front());
    }
  } else if (host_shape != HostShape::Fine && n > 2) {
    rest = 2;
    std::size_t left = n - 2, g = 2;
    for (; left >= g; left -= g, g *= 2) shape.push_back(static_cast<std::uint32_t>(g));
    for (g /= 2; g >= 2; g /= 2) {
      if (left >= g) {
        shape.push_back(static_cast<std::uint32_t>(g));
        left -= g;
      }
    }
    rest += left;
  }
  std::vector<Chunk> extents;
  for (std::uint32_t g : shape) {
    if (host_->take_extents(1, g, &extents) == 0) rest += g;  // the host limit or the system said no: chunks
  }
  if (rest != 0) {
    // The chunks for what the host extents do not cover, where placement puts a demotion.
    PoolStock stock(*this, out);
    if (placement::place(stock, {placement::Purpose::Demotion, rest, true, may_evict}).refused) {
      return_chunks(extents);  // back to the stock
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  out->insert(out->end(), extents.begin(), extents.end());
  return CUDA_SUCCESS;
}

CUresult DevicePool::fence_move(const Move& m) {
  // Memory the program freed may still be used by work queued before the free (the pool's frees do
  // not wait): as before any unmap, wait for it. Live memory is the caller's to order.
  const Entry owner = m.owner;
  CUcontext pending = nullptr;
  if (as_carved(owner) != nullptr) {
    // A slot holds memory freed at once (cuMemFree) and on streams besides its live allocations.
    pending = carved_pending_within(m.address, m.address + m.bytes);
  } else if (Block* b = as_block(owner)) {
    const int state = base_state(b->state.load(std::memory_order_acquire));
    if (state == kLive) return CUDA_SUCCESS;
    if (state == kPending) pending = b->context.load(std::memory_order_relaxed);
  } else {
    Slab* s = as_slab(owner);
    MutexLock lock(slabs_->of(s).mu);
    for (std::uint32_t i = 0; i < s->slots && pending == nullptr; ++i) {
      if (s->info[i].pending) pending = s->info[i].context;
    }
  }
  fence_unmap();
  if (pending == nullptr) return CUDA_SUCCESS;
  {
    // The wait is a cuCtxSynchronize, which a capture in that context refuses and is spoiled by
    // (captures.h). Memory freed on a stream may still be read by that stream's queued work, which
    // only the wait would see end: none of it is unmapped until the capture ends.
    driver::ContextScope in(d_, pending);
    if (in.status() == CUDA_SUCCESS && captures_.under_way(pending)) {
      log::debug("device {}: a move of {} bytes at {:#x} waits for a graph capture to end", device_, m.bytes, m.address);
      return CUDA_ERROR_NOT_READY;
    }
  }
  wait_for_context(pending);
  return CUDA_SUCCESS;
}

void DevicePool::forget_range(const Move& m) {
  if (as_carved(m.owner) != nullptr) {
    // Every slot the move held (a group's members; after the commit each a slot of its own).
    const std::size_t first = *carve_range_->slot_of(m.address);
    for (std::size_t k = 0; k < m.bytes / carve_range_->extent(); ++k) carve_range_->unclaim(first + k);
  } else if (Block* b = as_block(m.owner)) {
    std::erase_if(b->moving, [&m](const auto& range) { return range.first == m.address; });
  }
}

void DevicePool::swap_pieces(const Move& m, std::size_t first, std::span<const Chunk> old) {
  const std::ptrdiff_t host_delta = static_cast<std::ptrdiff_t>(host_granules_of(m.target)) - static_cast<std::ptrdiff_t>(host_granules_of(old));
  std::int64_t live_host_delta = 0;
  if (Block* b = as_block(m.owner)) {
    const bool live = base_state(b->state.load(std::memory_order_acquire)) == kLive;
    const std::size_t size = b->size.load(std::memory_order_relaxed);
    const std::uint64_t before = live ? host_bytes_of(b, size, chunk_) : 0;
    const auto at = b->chunks.begin() + static_cast<std::ptrdiff_t>(first);
    b->chunks.erase(at, at + static_cast<std::ptrdiff_t>(old.size()));
    b->chunks.insert(b->chunks.begin() + static_cast<std::ptrdiff_t>(first), m.target.begin(), m.target.end());
    b->host_chunks = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(b->host_chunks) + host_delta);
    if (live) live_host_delta = static_cast<std::int64_t>(host_bytes_of(b, size, chunk_)) - static_cast<std::int64_t>(before);
  } else if (as_carved(m.owner) != nullptr) {
    // The live allocations inside the slot change tier with it (carved_moves.cpp). Counted and marked
    // under the index's lock: a pending allocation taken back on its stream becomes live under it
    // alone and counts its host bytes by the marks (stream_reuse.cpp), before or after both.
    std::uint64_t live = 0;
    {
      MutexLock index(carve_index_mu_);
      live = carved_live_within(m.address, m.address + m.bytes);
      mark_tiers(m.address, m.target);
    }
    carve_range_->swapped(*carve_range_->slot_of(m.address), m.target);
    note_carved_idle();
    live_host_delta = m.to == Tier::Host ? static_cast<std::int64_t>(live) : -static_cast<std::int64_t>(live);
  } else {
    Slab* s = as_slab(m.owner);
    MutexLock lock(slabs_->of(s).mu);  // free_small reads the chunk's tier under it
    std::uint64_t live = 0;
    for (std::uint32_t i = 0; i < s->slots; ++i) {
      if (((s->live[i / 64] >> (i % 64)) & 1) != 0 && !s->info[i].pending) live += s->info[i].size;
    }
    s->chunk = m.target.front();
    live_host_delta = m.to == Tier::Host ? static_cast<std::int64_t>(live) : -static_cast<std::int64_t>(live);
  }
  if (as_carved(m.owner) == nullptr) mark_tiers(m.address, m.target);  // carved: above
  fig_.host_mapped.fetch_add(static_cast<std::uint64_t>(host_delta), std::memory_order_relaxed);
  const std::uint64_t live_host =
      fig_.live_host_bytes.fetch_add(static_cast<std::uint64_t>(live_host_delta), std::memory_order_relaxed) +
      static_cast<std::uint64_t>(live_host_delta);
  (m.to == Tier::Device ? fig_.moved_to_device : fig_.moved_to_host).fetch_add(m.bytes, std::memory_order_relaxed);
  (m.to == Tier::Device ? fig_.moved_live_to_device : fig_.moved_live_to_host)
      .fetch_add(static_cast<std::uint64_t>(live_host_delta < 0 ? -live_host_delta : live_host_delta), std::memory_order_relaxed);
  if (m.uncopied) fig_.moved_uncopied.fetch_add(m.bytes, std::memory_order_relaxed);
  if (counters_) {
    const std::uint64_t live = fig_.live_bytes.load(std::memory_order_relaxed);
    raise_peak(fig_.peak_live_host, live_host);
    raise_peak(fig_.peak_live_device, live > live_host ? live - live_host : 0);
  }
}

namespace {
std::atomic<std::uint64_t> frees_begun{0};  // process-wide: marks compare across devices
}  // namespace

std::uint64_t Pool::free_mark() { return frees_begun.load(std::memory_order_seq_cst) + 1; }

void DevicePool::note_free_begun(Block* b) {
  // Sequentially consistent with free_mark's load: a free that began before a mark was taken has a
  // smaller stamp; one that begins after, a stamp at least the mark.
  b->freed_at.store(frees_begun.fetch_add(1, std::memory_order_seq_cst) + 1, std::memory_order_relaxed);
}

void DevicePool::wait_while_moving(const Block* b) {
  UniqueMutexLock lock(move_mu_);
  move_cv_.wait(lock.native(), [b] { return (b->state.load(std::memory_order_acquire) & kMoving) == 0; });
}

void DevicePool::wait_while_moving(const Slab* s) {
  UniqueMutexLock lock(move_mu_);
  move_cv_.wait(lock.native(), [s] { return !s->moving.load(std::memory_order_acquire); });
}

}  // namespace uvmpool::pool
