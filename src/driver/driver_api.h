// The driver entry points uvmpool knows, generated from the one list in driver_functions.inc.
// Every table of driver functions (real-driver pointers, hooks, the simulated driver's exports) is
// built from UVMPOOL_DRIVER_FUNCTIONS, so they cannot drift apart.
#pragma once

// Without this, cuda.h renames cuMemAlloc to cuMemAlloc_v2 and so on with macros; with it, every
// versioned symbol (v1, _v2, _ptds, _ptsz) is declared under its real name and no macro remains, so
// the list can name each ABI symbol exactly and the compiler checks each signature against cuda.h.
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <cstddef>
#include <string_view>

#include "driver/driver_functions.inc"

namespace uvmpool::driver {

enum class Flavor : unsigned char { Any, Legacy, PerThread };
enum class Kind : unsigned char { Hook, Pass };

// One index per entry of the list, named after the ABI symbol.
enum class Fn : int {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) symbol,
  UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
      kCount
};
inline constexpr std::size_t kFunctionCount = static_cast<std::size_t>(Fn::kCount);

struct FunctionInfo {
  const char* base;    // name as asked of cuGetProcAddress
  const char* symbol;  // exported versioned symbol
  int version;         // lowest CUDA version answered with this symbol
  Flavor flavor;
  Kind kind;
};

inline constexpr FunctionInfo kFunctions[] = {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  {#base, #symbol, version, Flavor::flavor, Kind::kind},
    UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
};
static_assert(sizeof(kFunctions) / sizeof(kFunctions[0]) == kFunctionCount);

// Each entry's signature, checked against the toolkit's own declaration of the symbol.
namespace sig {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  using symbol = CUresult(CUDAAPI*) params;                          \
  static_assert(std::is_same_v<symbol, decltype(&::symbol)>, #symbol " differs from cuda.h");
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace sig

// A table of typed pointers, one per entry; used for the real driver and for the hooks.
struct Table {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) sig::symbol symbol = nullptr;
  UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X

  // The entries as untyped pointers, in list order (for lookups by index).
  void* const* raw() const { return reinterpret_cast<void* const*>(this); }
  void** raw() { return reinterpret_cast<void**>(this); }
};
static_assert(sizeof(Table) == kFunctionCount * sizeof(void*));

// The entry cuGetProcAddress(base, version, flags) resolves to, as the real driver answers it: the
// highest `version` not above the one asked for, of the flavor the flags ask for (per-thread when
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM is set and such a variant exists). -1 if none.
int find_entry(std::string_view base, int cuda_version, cuuint64_t flags);

// The entry whose exported symbol is `symbol`, or -1.
int find_symbol(std::string_view symbol);

}  // namespace uvmpool::driver
