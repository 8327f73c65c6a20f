// The program's own cuMemCreate handles that the pool counts (Pool::create_external), and how long
// their memory lives.
//
// A device cuMemCreate counts against the budget, or, spilled, its pinned host memory against the
// host limit, for as long as the driver keeps the memory. The driver frees it only once every
// reference to the handle is released (cuMemCreate's, and one for each cuMemRetainAllocationHandle
// that answered it) and every mapping of it is unmapped: a handle released while mapped keeps its
// memory until the unmap. Both are common: NCCL frees its buffers by retaining the handle under the
// address, releasing it, unmapping, and releasing it again (two releases of one handle); other
// programs release a handle as soon as it is mapped. Counting only until the first cuMemRelease
// left memory the driver still held uncounted, and the budget let the pool take it again.
//
// So each handle keeps its references and mappings here; the memory's end (the release or unmap that
// leaves neither) gives back what it counted. The cuMemMap and cuMemUnmap hooks tell it of the
// program's mappings (the pool's own never pass through the hooks). A handle whose last reference went
// while mapped is known by its mappings only: the driver may give its value to a new handle, which is
// then another entry. Handles not counted here (host memory asked for, another process's imports)
// pass by untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"
#include "pool/vmm.h"

namespace uvmpool::pool {

class ExternalHandles {
 public:
  // What one handle counts, and where.
  struct Counted {
    int device = 0;
    std::size_t bytes = 0;
    Tier tier = Tier::Device;
    CUmemAllocationProp requested{};  // what the program asked for (a spilled handle's differs)
  };

  // A handle made and counted: one reference, no mapping. Answers what an entry still naming the same
  // value counted, when the new handle ends it (its last release is under way on another thread).
  std::optional<Counted> created(Handle handle, const Counted& counted);
  // cuMemRetainAllocationHandle answered `handle` for `at`: one reference more to the memory mapped
  // there (a counted handle's, possibly one whose references had all gone).
  void retained(Handle handle, CUdeviceptr at);
  // cuMemRelease in two steps. Before the driver's release, the memory `handle` names (0: none
  // counted); once the driver has released it, that memory loses a reference: what it counted, when
  // this was its last reference and nothing maps it any more. Named before, not after: from the
  // driver's release on, another thread's cuMemCreate may get the same value, and released(handle)
  // would then take the new handle's reference.
  std::uint64_t releasing(Handle handle) const;
  std::optional<Counted> released(std::uint64_t memory);
  // cuMemMap(va, size, 0, handle) succeeded. Answers what a mapping known at `va` ended, if the
  // program unmapped it unseen.
  std::optional<Counted> mapped(CUdeviceptr va, std::size_t size, Handle handle);
  // cuMemUnmap(va, size) succeeded: what the memories left with neither reference nor mapping
  // counted.
  std::vector<Counted> unmapped(CUdeviceptr va, std::size_t size);
  // The counted handle's, while it has a reference.
  std::optional<Counted> find(Handle handle) const;
  // Counted memories, and mappings of them, known now (tests, invariants).
  std::size_t live() const;
  std::size_t mappings() const;

 private:
  struct Entry {
    Counted counted;
    Handle handle = 0;        // while `references` > 0
    std::uint32_t references = 1;
    std::uint32_t mappings = 0;
  };
  struct Mapping {
    std::size_t size = 0;
    std::uint64_t entry = 0;
  };
  // The entry's end, if it has one now (under mu_).
  std::optional<Counted> end_if_unused(std::uint64_t id) UVMPOOL_REQUIRES(mu_);

  mutable Mutex mu_;  // a leaf
  std::uint64_t next_id_ UVMPOOL_GUARDED_BY(mu_) = 1;
  std::unordered_map<std::uint64_t, Entry> entries_ UVMPOOL_GUARDED_BY(mu_);
  std::unordered_map<Handle, std::uint64_t> by_handle_ UVMPOOL_GUARDED_BY(mu_);  // handles with references
  std::map<CUdeviceptr, Mapping> mappings_ UVMPOOL_GUARDED_BY(mu_);              // by address
};

}  // namespace uvmpool::pool
