// Where each parameter of a kernel lies in its argument buffer, for reading a launch's arguments.
//
// A launch in the kernelParams form hands the driver one pointer per parameter and no count or sizes:
// only the driver knows them, through cuFuncGetParamInfo (a CUfunction) or cuKernelGetParamInfo (a
// CUkernel, which launches accept cast to a CUfunction), CUDA 12.4 and later. Asking costs a driver
// call per parameter, so each function is asked once and its answer kept. Launches repeat the same
// few hundred functions, so the launch path finds the answer in a small per-thread table and takes
// the shared table's lock only on that table's misses.
//
// Handles are addresses the driver may reuse once a module or library is unloaded, so an unload
// forgets every answer (forget_all); a stale answer would make the hooks read past the end of a
// program's kernelParams array. Forgotten answers are kept until the table is destroyed: a thread may
// still be reading one it found just before the unload (each is a few dozen bytes; programs unload
// rarely). The process's table is never destroyed (launches may come during exit).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "config/thread_safety.h"
#include "driver/driver_api.h"

namespace uvmpool::tiering {

struct ParamLayout {
  struct Param {
    std::uint32_t offset = 0;
    std::uint32_t size = 0;
  };
  std::vector<Param> params;  // in parameter order
  bool known = false;         // false: the driver could not say (before CUDA 12.4, or a handle it refused)
  // Whether the driver has loaded the function: a launch of it reached the driver (Tiering::after_launch)
  // or a call on it did (its attributes, its occupancy, cuFuncLoad: Tiering::end_loading_call). Until
  // then such a call may load its module (lazy loading), which waits like a synchronous copy
  // (host_wait_gate.h).
  mutable std::atomic<bool> loaded{false};
};

class ParamLayouts {
 public:
  // The most parameters asked for: the argument buffer holds at most 32764 bytes (CUDA 12.1+).
  static constexpr std::size_t kMaxParams = 32764;

  explicit ParamLayouts(const driver::Table& driver);
  ~ParamLayouts();  // frees every answer: no launch may be reading through this table any more
  ParamLayouts(const ParamLayouts&) = delete;
  ParamLayouts& operator=(const ParamLayouts&) = delete;

  // The layout of `f`, a CUfunction or a CUkernel cast to one; never null (unknown layouts are kept
  // too, so the driver is asked once). `f` must not be null.
  const ParamLayout* find(CUfunction f);
  // The layout of `f` if the driver was asked about it already, else null: no driver call. Asking may
  // load a lazily loaded function, which waits inside the driver as its first launch does
  // (Tiering::before_launch gates that first).
  const ParamLayout* kept(CUfunction f);
  // After cuModuleUnload or cuLibraryUnload succeeded: the driver may reuse handles.
  void forget_all();

  std::uint64_t driver_queries() const { return queries_.load(std::memory_order_relaxed); }

 private:
  const ParamLayout* ask_driver(CUfunction f);

  const driver::Table& driver_;
  // Unique among all tables ever made, renewed by forget_all: per-thread tables drop older answers (a
  // table made where a destroyed one stood does not inherit its answers).
  std::atomic<std::uint64_t> generation_;
  std::atomic<std::uint64_t> queries_{0};     // functions the driver was asked about
  Mutex mu_;
  std::unordered_map<CUfunction, const ParamLayout*> known_ UVMPOOL_GUARDED_BY(mu_);
  std::vector<const ParamLayout*> retired_ UVMPOOL_GUARDED_BY(mu_);  // forgotten, freed with the table (see above)
};

}  // namespace uvmpool::tiering
