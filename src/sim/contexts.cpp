// Primary contexts (retain/release counting, reset, flags, state), created contexts and the per-thread
// current-context stack, as the driver API defines them.
#include "sim/contexts.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sim/address_space.h"
#include "sim/devices.h"
#include "sim/launch.h"
#include "sim/entry_points.h"
#include "sim/timeline.h"
#include "sim/settings.h"
#include "sim/streams_events.h"

namespace uvmpool::sim {
namespace {

struct ContextState {
  unsigned flags = 0;
  unsigned primary_refs = 0;  // primary contexts only
};

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Context>> all;        // every context ever made, never freed
  std::unordered_set<const Context*> known;
  std::unordered_map<const Context*, ContextState> state;
  Context* primary[kMaxDevices] = {};
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed: calls may come during exit
  return *instance;
}

// The calling thread's context stack; the current context is the top. Entries may be destroyed.
thread_local std::vector<Context*> t_stack;

// Peer links (cuCtxEnablePeerAccess), per device pair: bit o of g_peers[a]: a may reach o's memory.
std::atomic<std::uint32_t> g_peers[kMaxDevices];

// Caller holds the registry mutex.
Context* make_context(Registry& r, int device, bool primary, unsigned flags) {
  auto context = std::make_unique<Context>();
  context->device = device;
  context->primary = primary;
  Context* raw = context.get();
  r.all.push_back(std::move(context));
  r.known.insert(raw);
  r.state[raw].flags = flags;
  return raw;
}

Context* primary_of(Registry& r, int device) {
  if (r.primary[device] == nullptr) r.primary[device] = make_context(r, device, true, 0);
  return r.primary[device];
}

// Frees what was made in the context. Called once it is inactive, without the registry mutex.
void release_resources(Context* context) {
  // Its peer links go with it, both ways (kept per device: a device's other contexts lose them too).
  const int device = context->device;
  g_peers[device].store(0, std::memory_order_release);
  for (auto& links : g_peers) links.fetch_and(~(1u << device), std::memory_order_acq_rel);
  release_context_memory(context);
  timeline::release_context(context);
  release_context_modules(context);
}

// Scheduling flags are exclusive; the rest must be known context flags.
bool valid_context_flags(unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return false;
  const unsigned sched = flags & CU_CTX_SCHED_MASK;
  return sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
         sched == CU_CTX_SCHED_BLOCKING_SYNC;
}

}  // namespace

Context* from_handle(CUcontext handle) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto* context = reinterpret_cast<Context*>(handle);
  return r.known.count(context) != 0 ? context : nullptr;
}

CUresult current_context(Context** out) {
  if (t_stack.empty() || t_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!t_stack.back()->active.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = t_stack.back();
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice_v1 dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  Context* context = nullptr;
  bool started = false;
  {
    std::lock_guard lock(r.mutex);
    context = primary_of(r, dev);
    started = r.state[context].primary_refs++ == 0;
    if (started) {
      context->sticky.store(CUDA_SUCCESS, std::memory_order_relaxed);  // a new primary context
      context->active.store(true, std::memory_order_release);
    }
  }
  if (started) context_started(context);  // the first retain creates the primary context
  *pctx = to_handle(context);
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxRelease_v2(CUdevice_v1 dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  Context* context = nullptr;
  {
    std::lock_guard lock(r.mutex);
    context = primary_of(r, dev);
    ContextState& state = r.state[context];
    if (state.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;  // released more than retained
    if (--state.primary_refs != 0) return CUDA_SUCCESS;
    context->active.store(false, std::memory_order_release);
  }
  release_resources(context);  // the last release destroys the primary context
  return CUDA_SUCCESS;
}

// Frees everything made in the primary context and leaves it inactive with no references, as after
// its last release; the next retain starts it afresh.
CUresult impl::cuDevicePrimaryCtxReset_v2(CUdevice_v1 dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  Context* context = nullptr;
  bool was_active = false;
  {
    std::lock_guard lock(r.mutex);
    context = primary_of(r, dev);
    r.state[context].primary_refs = 0;
    was_active = context->active.exchange(false, std::memory_order_acq_rel);
  }
  if (was_active) release_resources(context);
  return CUDA_SUCCESS;
}

// Since CUDA 11 (_v2) the flags may be set while the primary context is active.
CUresult impl::cuDevicePrimaryCtxSetFlags_v2(CUdevice_v1 dev, unsigned int flags) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!valid_context_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.state[primary_of(r, dev)].flags = flags;
  return CUDA_SUCCESS;
}

CUresult impl::cuDevicePrimaryCtxGetState(CUdevice_v1 dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Context* context = primary_of(r, dev);
  *flags = r.state[context].flags;
  *active = context->active.load(std::memory_order_acquire) ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice_v1 dev) {
  if (pctx == nullptr || !valid_context_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  Context* context = nullptr;
  {
    std::lock_guard lock(r.mutex);
    context = make_context(r, dev, false, flags);
    context->active.store(true, std::memory_order_release);
  }
  context_started(context);
  t_stack.push_back(context);  // a new context becomes current to the creating thread
  *pctx = to_handle(context);
  return CUDA_SUCCESS;
}

// Execution affinity (CUDA 11.4 to 12.4's form) is not simulated; without it _v3 is _v2.
CUresult impl::cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                              CUdevice_v1 dev) {
  if (numParams < 0) return CUDA_ERROR_INVALID_VALUE;
  if (numParams != 0 || paramsArray != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return impl::cuCtxCreate_v2(pctx, flags, dev);
}

// Execution affinity and CIG are not simulated; without them _v4 is _v2.
CUresult impl::cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                              CUdevice dev) {
  if (ctxCreateParams != nullptr &&
      (ctxCreateParams->numExecAffinityParams != 0 || ctxCreateParams->execAffinityParams != nullptr ||
       ctxCreateParams->cigParams != nullptr))
    return CUDA_ERROR_NOT_SUPPORTED;
  return impl::cuCtxCreate_v2(pctx, flags, dev);
}

CUresult impl::cuCtxDestroy_v2(CUcontext ctx) {
  Context* context = from_handle(ctx);
  // Primary contexts are released, never destroyed.
  if (context == nullptr || context->primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (!context->active.exchange(false, std::memory_order_acq_rel)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  // Popped if current to this thread; other threads that have it current now get
  // CUDA_ERROR_CONTEXT_IS_DESTROYED from calls that need it.
  if (!t_stack.empty() && t_stack.back() == context) t_stack.pop_back();
  release_resources(context);
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_stack.empty() ? nullptr : to_handle(t_stack.back());
  return CUDA_SUCCESS;
}

// Replaces the top of the stack; NULL pops it (a no-op on an empty stack).
CUresult impl::cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* context = from_handle(ctx);
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_stack.empty())
    t_stack.push_back(context);
  else
    t_stack.back() = context;
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = from_handle(ctx);
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(context);
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = to_handle(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxGetDevice(CUdevice_v1* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  *device = context->device;
  return CUDA_SUCCESS;
}

namespace {
// The current context's device and the peer context's, checked as the driver checks them.
CUresult peer_pair(CUcontext peer, int* accessor, int* owner) {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  Context* other = from_handle(peer);
  if (other == nullptr || !other->active.load()) return CUDA_ERROR_INVALID_CONTEXT;
  if (other->device == context->device) return CUDA_ERROR_INVALID_DEVICE;
  *accessor = context->device;
  *owner = other->device;
  return CUDA_SUCCESS;
}
}  // namespace

bool peer_enabled(int accessor, int owner) {
  if (accessor < 0 || accessor >= kMaxDevices || owner < 0 || owner >= kMaxDevices) return false;
  return (g_peers[accessor].load(std::memory_order_acquire) >> owner & 1) != 0;
}

CUresult impl::cuDeviceCanAccessPeer(int* can, CUdevice_v1 dev, CUdevice_v1 peer) {
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count() || peer < 0 || peer >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer ? 1 : 0;  // every pair of simulated devices is linked; a device is not its own peer
  return CUDA_SUCCESS;
}

CUresult impl::cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int a = 0, o = 0;
  if (CUresult status = peer_pair(peer, &a, &o); status != CUDA_SUCCESS) return status;
  const std::uint32_t bit = 1u << o;
  return (g_peers[a].fetch_or(bit) & bit) != 0 ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
}

CUresult impl::cuCtxDisablePeerAccess(CUcontext peer) {
  int a = 0, o = 0;
  if (CUresult status = peer_pair(peer, &a, &o); status != CUDA_SUCCESS) return status;
  const std::uint32_t bit = 1u << o;
  return (g_peers[a].fetch_and(~bit) & bit) == 0 ? CUDA_ERROR_PEER_ACCESS_NOT_ENABLED : CUDA_SUCCESS;
}

// All work is done at submission; the only thing to wait for is what a test holds back.
CUresult impl::cuCtxSynchronize() {
  Context* context = nullptr;
  if (CUresult status = current_context(&context); status != CUDA_SUCCESS) return status;
  if (const CUresult unsafe = timeline::unsafe_call(); unsafe != CUDA_SUCCESS) return unsafe;
  return timeline::synchronize_context(context);
}

}  // namespace uvmpool::sim
