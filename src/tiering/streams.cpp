#include "tiering/streams.h"


#include <algorithm>
#include <new>

#include "config/quiet_at_fork.h"
#include "driver/context_scope.h"

namespace uvmpool::tiering {
namespace {

// The context the calling thread reported last, and the registry's generation then: 16 bytes of TLS
// (the library's TLS must stay small: src/trace/rings.cpp says why).
struct LastSeen {
  CUcontext context = nullptr;
  std::uint64_t generation = 0;
};
thread_local LastSeen t_last_seen;

// Runs fn with `context` current on the calling thread; false, without running it, if the context
// cannot be made current (it is gone, and its work with it).
template <typename Fn>
bool in_context(const driver::Table& d, CUcontext context, Fn&& fn) {
  const driver::ContextScope in(d, context);
  if (in.status() != CUDA_SUCCESS) return false;
  fn();
  return true;
}

}  // namespace

StreamRegistry& StreamRegistry::process() {
  static StreamRegistry* const instance = [] {
    auto* r = new StreamRegistry;  // never destroyed: hooks may run during exit
    // A forked child has none of the parent's streams, holds or threads (CUDA refuses it anyway; what
    // it calls must fail as the driver says, not wait at a gate the parent's mover closed).
    config::at_fork(nullptr, nullptr, [] { process().reset_in_child(); });
    return r;
  }();
  return *instance;
}

void StreamRegistry::reset_in_child() UVMPOOL_NO_THREAD_SAFETY_ANALYSIS {
  new (&mu_) Mutex;  // it may have been held by a thread the child does not have
  targets_.clear();
  hold_ = {};
  retiring_.clear();  // the parent's events: not the child's to destroy
  generation_.fetch_add(1, std::memory_order_relaxed);
  host_waits_.reset_in_child();
  submissions_.reset_in_child();
  remaps_.reset_in_child();
}

void StreamRegistry::add_context_locked(CUcontext context) {
  const bool known = std::any_of(targets_.begin(), targets_.end(), [&](const Target& t) {
    return t.context == context && t.stream == CU_STREAM_LEGACY;
  });
  if (!known) targets_.push_back({context, CU_STREAM_LEGACY});
}

StreamRegistry::Hold StreamRegistry::created(CUstream stream, CUcontext context, bool non_blocking) {
  if (context == nullptr) return {};
  MutexLock lock(mu_);
  add_context_locked(context);
  if (stream != nullptr) targets_.push_back({context, stream, non_blocking});
  return hold_;
}

void StreamRegistry::context_made(const driver::Table& d, CUcontext context) {
  if (context == nullptr) return;
  const Hold hold = created(nullptr, context, false);
  if (hold.flag == 0 || d.cuStreamWaitValue32_v2 == nullptr) return;
  // A retained primary context is not made current; a made one is, and stays so.
  in_context(d, context, [&] { d.cuStreamWaitValue32_v2(CU_STREAM_LEGACY, hold.flag, hold.value, CU_STREAM_WAIT_VALUE_GEQ); });
}

void StreamRegistry::destroying(CUstream stream, const driver::Table* driver) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return;
  MutexLock lock(mu_);
  const auto it = std::find_if(targets_.begin(), targets_.end(), [&](const Target& t) { return t.stream == stream; });
  if (it == targets_.end()) return;
  const Target gone = *it;
  targets_.erase(it);
  // A blocking stream's work is ordered by its legacy stream; with nothing ever moving, no one waits.
  if (driver == nullptr || !gone.fence || !keep_retiring_.load(std::memory_order_acquire)) return;
  const driver::Table& d = *driver;
  // The ones whose work has completed go first (whether or not a mover ever runs, the list stays as
  // long as the streams destroyed with work still running).
  std::erase_if(retiring_, [&](const Retiring& r) {
    bool done = false;
    const bool reachable = in_context(d, r.context, [&] {
      done = r.lent == 0 && d.cuEventQuery(r.event) != CUDA_ERROR_NOT_READY;  // a hold's: not yet
      if (done) d.cuEventDestroy_v2(r.event);
    });
    return done || !reachable;
  });
  CUevent recorded = nullptr;
  in_context(d, gone.context, [&] {
    CUevent e = nullptr;
    if (d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
    if (d.cuEventRecord(e, stream) == CUDA_SUCCESS) {
      recorded = e;
    } else {
      d.cuEventDestroy_v2(e);
    }
  });
  if (recorded != nullptr) retiring_.push_back({gone.context, recorded});
}

void StreamRegistry::returned(CUevent event) {
  MutexLock lock(mu_);
  for (Retiring& r : retiring_) {
    if (r.event == event && r.lent != 0) {
      --r.lent;
      return;
    }
  }
}

void StreamRegistry::saw_context(CUcontext context) {
  const std::uint64_t generation = generation_.load(std::memory_order_acquire);
  if (context == nullptr || (t_last_seen.context == context && t_last_seen.generation == generation)) return;
  {
    MutexLock lock(mu_);
    add_context_locked(context);
  }
  t_last_seen = {context, generation};
}

void StreamRegistry::forget_context(CUcontext context) {
  MutexLock lock(mu_);
  std::erase_if(targets_, [&](const Target& t) { return t.context == context; });
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::size_t StreamRegistry::size() const {
  MutexLock lock(mu_);
  return targets_.size();
}

std::size_t StreamRegistry::retiring_count() const {
  MutexLock lock(mu_);
  return retiring_.size();
}

}  // namespace uvmpool::tiering
