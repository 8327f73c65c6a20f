// The boundary: one wrapper per hooked function, generated from the X-macro list, that calls the
// hook of its name and turns any C++ exception into CUDA_ERROR_OUT_OF_MEMORY. Every route (dlsym,
// cuGetProcAddress, the exported symbols) hands out these, never the impl hooks themselves, so no
// exception thrown inside uvmpool (std::bad_alloc above all) reaches the program's C frames.
#include <atomic>
#include <cstdio>
#include <exception>
#include <new>

#include "config/log.h"
#include "hooks/hooks.h"

namespace uvmpool::hooks {

CUresult answer_exception(const char* where) noexcept {
  static std::atomic<bool> told{false};
  if (!told.exchange(true, std::memory_order_relaxed)) {
    const char* what = "unknown exception";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    try {
      log::warn("{}: {}: answered CUDA_ERROR_OUT_OF_MEMORY (further such failures are not logged)", where, what);
    } catch (...) {
      std::fprintf(stderr, "[uvmpool] %s: %s: answered CUDA_ERROR_OUT_OF_MEMORY\n", where, what);
    }
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

namespace guarded {
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) \
  UVMPOOL_IF_##kind(CUresult CUDAAPI symbol params noexcept {        \
    try {                                                            \
      return impl::symbol args;                                      \
    } catch (...) {                                                  \
      return answer_exception(#symbol);                              \
    }                                                                \
  })
UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
}  // namespace guarded

}  // namespace uvmpool::hooks
