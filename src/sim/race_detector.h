// The race detector: every executed piece of work leaves a record of the address ranges it touched
// and its virtual interval; a call that changes the memory behind an address range (unmap, map,
// release of a mapped handle, access taken away, address range freed) asks whether unfinished work
// touched it. "Unfinished" is relative to the calling thread's host clock: work that ends after it
// might still run on a GPU, so changing its memory now is the bug tiering must never make.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/contexts.h"

namespace uvmpool::sim::detector {

struct WorkRecord {
  Context* context = nullptr;  // fails (sticky) when a violation hits this work
  int device = 0;
  std::string stream;          // "stream 0x…" or "legacy stream", for the report
  std::string what;
  std::uint64_t start = 0, end = 0;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
};

// Keeps the record of executed work (no-op for work that touched nothing).
void record(WorkRecord work);

// Whether unfinished work touched [first, last): if so, logs the call and every such work, counts one
// violation and fails each such work's context with CUDA_ERROR_ILLEGAL_ADDRESS. `call` names the call,
// e.g. "cuMemUnmap". Callable with the address space's lock held.
bool check(std::string_view call, std::uintptr_t first, std::uintptr_t last);

// Whether any work is on record (a cheap test before looking for the ranges a call changes).
bool any_records();

unsigned long long violations();
void reset();

}  // namespace uvmpool::sim::detector
