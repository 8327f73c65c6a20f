#include "pool/slab_classes.h"

#include <bit>

#include "pool/device_pool.h"

namespace uvmpool::pool {

SlabClasses::SlabClasses(DeviceFigures& fig) : fig_(fig), classes_(std::make_unique<Class[]>(kSmallClasses)) {}

SlabClasses::Class& SlabClasses::of(const Slab* s) {
  return classes_[std::atomic_ref(const_cast<Slab*>(s)->cls).load(std::memory_order_relaxed)];
}

void SlabClasses::link(Slab*& head, Slab* s) {
  s->prev = nullptr;
  s->next = head;
  if (head != nullptr) head->prev = s;
  head = s;
  s->listed = true;
}

void SlabClasses::unlink(Slab*& head, Slab* s) {
  if (s->prev != nullptr) s->prev->next = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  if (head == s) head = s->next;
  s->prev = s->next = nullptr;
  s->listed = false;
}

void SlabClasses::count_cached(const Slab* s, int delta) {
  if (s->chunk.tier != Tier::Device) return;
  fig_.chunks_cached.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
}

bool SlabClasses::take_slot(Class& c, Slab** slab, std::uint32_t* slot) {
  Slab* s = c.head;
  if (s == nullptr) return false;
  if (s->used == 0) {
    --c.empty;
    count_cached(s, -1);
  }
  const std::size_t words = s->live.size();
  for (std::size_t n = 0; n < words; ++n) {
    const std::size_t w = (s->hint + n) % words;
    if (s->live[w] != ~std::uint64_t{0}) {
      const int bit = std::countr_one(s->live[w]);
      s->live[w] |= std::uint64_t{1} << bit;
      s->hint = static_cast<std::uint32_t>(w);
      ++s->used;
      *slot = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(bit));
      break;
    }
  }
  // A listed slab has a free slot, so one was found.
  if (s->used == s->slots) unlink(c.head, s);
  *slab = s;
  return true;
}

void SlabClasses::add(Class& c, Slab* s) {
  link(c.head, s);
  ++c.empty;
  count_cached(s, +1);
}

bool SlabClasses::free_slot(Class& c, Slab* s, std::uint32_t slot) {
  s->info[slot] = SlotInfo{};
  s->live[slot / 64] &= ~(std::uint64_t{1} << (slot % 64));
  --s->used;
  // Moving: off the list until the move ends, when unclaim lists it and counts it empty if it is.
  if (s->moving.load(std::memory_order_relaxed)) return false;
  if (!s->listed) link(c.head, s);
  if (s->used != 0) return false;
  ++c.empty;
  count_cached(s, +1);
  if (c.empty <= 1 || process_exiting()) return false;
  // More than one empty slab in this class: this one gives its chunk back to the pool.
  unlink(c.head, s);
  --c.empty;
  count_cached(s, -1);
  s->state.store(kDead, std::memory_order_relaxed);
  return true;
}

void SlabClasses::claim(Class& c, Slab* s) {
  s->moving.store(true, std::memory_order_relaxed);
  if (s->listed) unlink(c.head, s);
  if (s->used == 0) {
    --c.empty;
    count_cached(s, -1);
  }
}

void SlabClasses::unclaim(Class& c, Slab* s) {
  s->moving.store(false, std::memory_order_relaxed);
  if (s->used < s->slots) link(c.head, s);
  if (s->used == 0) {
    ++c.empty;
    count_cached(s, +1);
  }
}

std::vector<Slab*> SlabClasses::take_empty() {
  std::vector<Slab*> empty;
  for (int cls = 0; cls < kSmallClasses; ++cls) {
    Class& c = classes_[cls];
    MutexLock lock(c.mu);
    for (Slab* s = c.head; s != nullptr;) {
      Slab* next = s->next;
      if (s->used == 0) {
        unlink(c.head, s);
        --c.empty;
        count_cached(s, -1);
        s->state.store(kDead, std::memory_order_relaxed);
        empty.push_back(s);
      }
      s = next;
    }
  }
  return empty;
}

void SlabClasses::add_counts(DeviceStats& s) const {
  for (int c = 0; c < kSmallClasses; ++c) {
    s.allocations_by_size[size_bucket(class_size(c))] += classes_[c].allocations.load(std::memory_order_relaxed);
    s.frees += classes_[c].frees.load(std::memory_order_relaxed);
  }
}

}  // namespace uvmpool::pool
