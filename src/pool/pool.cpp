// The process-wide pool: one DevicePool per device, chosen by the current context at allocation and
// by the address map at free (so a free under another device's context finds the right pool).
#include "pool/pool.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "config/leak_marker.h"
#include "config/log.h"
#include "config/quiet_at_fork.h"
#include "config/thread_safety.h"
#include "driver/context_scope.h"
#include "driver/real_driver.h"
#include "pool/device_pool.h"
#include "pool/held_frees.h"
#include "pool/host_tier.h"

namespace uvmpool::pool {
namespace {

std::atomic<bool> g_exiting{false};
std::atomic<Pool*> g_process{nullptr};
Mutex g_process_mu;

void on_exit() {
  g_exiting.store(true, std::memory_order_relaxed);
  // The reserve thread must not be inside the driver while the driver tears itself down.
  if (Pool* p = g_process.load(std::memory_order_acquire)) p->stop_background();
}

// The child of a fork cannot use the parent's CUDA state (and other threads' locks may be held in
// its copy), so it drops the parent's pool without touching it and makes a fresh one on first use.
void on_fork_child() {
  if (Pool* p = g_process.exchange(nullptr)) config::intentionally_leaked(p)->abandon();
  new (&g_process_mu) Mutex;
}

constexpr int kMaxDevices = 64;

std::uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace

bool process_exiting() { return g_exiting.load(std::memory_order_relaxed); }

PoolConfig PoolConfig::from_options(const config::Options& o) {
  PoolConfig c;
  c.device_limit = o.device_limit;
  c.headroom = o.device_headroom.bytes;
  c.chunk_size = o.chunk_size.bytes;
  c.extent_size = o.extent_size.bytes;
  c.carve_max = o.carve_max.bytes;
  c.carve_group = static_cast<std::size_t>(o.carve_group);
  c.repeat_places = o.repeat_places;
  c.spill = o.spill;
  c.host_limit = o.host_limit;
  c.host_reserve = o.host_reserve.bytes;
  c.report_host = o.report_host;
  c.guard = o.guard;
  return c;
}

struct Pool::Devices {
  explicit Devices(const driver::Table& d) : captures(d) {}
  AddressMap map;
  std::atomic<DeviceWaits*> waits{nullptr};  // set_device_waits
  Captures captures;                         // the graph captures under way (captures.h)
  HeldFrees held;                            // frees put off until a capture is over (held_frees.h)
  std::array<std::atomic<DevicePool*>, kMaxDevices> pools{};
  std::array<std::atomic<bool>, kMaxDevices> unsupported{};
  Mutex init_mu;  // one DevicePool made per device
  ExternalHandles externals;  // the program's own cuMemCreate handles the pool counted (create_external)
};

Pool::Pool(const driver::Table& driver, PoolConfig config)
    : driver_(driver), config_(config), devices_(std::make_unique<Devices>(driver)) {
  if (config_.spill) {
    // A limit in bytes is clamped to the memory the machine has: more can never be pinned, and a
    // figure near 2^64 would only make the arithmetic of every check harder.
    const std::uint64_t physical = physical_memory();
    std::uint64_t limit = config_.host_limit.resolve(physical);
    if (physical != 0) limit = std::min(limit, physical);
    host_ = std::make_unique<HostTier>(driver_, limit,
                                       std::chrono::milliseconds(config_.host_idle_ms));
  }
}

Pool::~Pool() {
  if (!devices_) return;  // abandoned after fork: nothing of it may be touched
  stop_background();
  for (auto& slot : devices_->pools) delete slot.load();
}

void Pool::stop_background() {
  if (host_) host_->stop();
}

void Pool::set_device_waits(DeviceWaits* waits, DeviceWaits* expected) {
  devices_->waits.compare_exchange_strong(expected, waits, std::memory_order_acq_rel);
}

void Pool::abandon() {
  for (auto& slot : devices_->pools) {
    if (DevicePool* p = slot.load()) p->abandon();
  }
  if (host_) {
    host_->abandon();
    // Its thread does not exist in the child; its destructor must not run.
    config::intentionally_leaked(host_.release());
  }
  // Leaked on purpose: the child must not run its destructors. The device pools hang off it.
  config::intentionally_leaked(devices_.release());
}

Pool* Pool::process() {
  if (Pool* p = g_process.load(std::memory_order_acquire)) return p;
  MutexLock lock(g_process_mu);
  if (Pool* p = g_process.load(std::memory_order_relaxed)) return p;
  const driver::RealDriver* real = driver::real();
  if (real == nullptr) return nullptr;
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit(on_exit);  // runs before the destructors of objects made earlier, which may free
    config::at_fork(nullptr, nullptr, on_fork_child);
  });
  Pool* p = new Pool(real->table, PoolConfig::from_options(config::options()));  // never destroyed
  g_process.store(p, std::memory_order_release);
  return p;
}

Pool* Pool::existing() { return g_process.load(std::memory_order_acquire); }

DevicePool* Pool::device_pool(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (DevicePool* p = devices_->pools[device].load(std::memory_order_acquire)) return p;
  if (devices_->unsupported[device].load(std::memory_order_relaxed)) return nullptr;
  MutexLock lock(devices_->init_mu);
  if (DevicePool* p = devices_->pools[device].load(std::memory_order_relaxed)) return p;
  auto pool = std::make_unique<DevicePool>(driver_, device, config_, devices_->map, host_.get(), devices_->waits,
                                           devices_->captures);
  if (const CUresult r = pool->init(); r != CUDA_SUCCESS) {
    log::info("device {}: no virtual memory management ({}); the driver serves its allocations", device,
              static_cast<int>(r));
    devices_->unsupported[device].store(true, std::memory_order_relaxed);
    return nullptr;
  }
  devices_->pools[device].store(pool.get(), std::memory_order_release);
  return pool.release();
}

CUresult Pool::current_device(int* device, CUcontext* context) {
  CUcontext ctx = nullptr;
  if (const CUresult r = driver_.cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *context = ctx;
  return device_of_current(ctx, device);
}

CUresult Pool::device_of_current(CUcontext ctx, int* device) {
  // Most programs use one context per thread: remember its device instead of asking each time.
  thread_local CUcontext last_context = nullptr;
  thread_local int last_device = -1;
  thread_local const Pool* last_pool = nullptr;
  if (ctx != last_context || last_pool != this) {
    CUdevice dev = -1;
    if (const CUresult r = driver_.cuCtxGetDevice(&dev); r != CUDA_SUCCESS) return r;
    last_context = ctx;
    last_device = dev;
    last_pool = this;
  }
  *device = last_device;
  return CUDA_SUCCESS;
}

CUresult Pool::allocate(CUdeviceptr* out, std::size_t bytes) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  CUcontext ctx = nullptr;
  if (const CUresult r = current_device(&device, &ctx); r != CUDA_SUCCESS) return r;
  DevicePool* p = device_pool(device);
  if (p == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  release_held();  // frees held through a capture whose end the hooks did not see
  return p->allocate(out, bytes, ctx);
}

bool Pool::capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (driver_.cuStreamIsCapturing == nullptr || driver_.cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS) return false;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

namespace {
// The key pending frees (pending_frees.h) know `stream` by, in `context`.
StreamKey stream_key(CUstream stream, CUcontext context) {
  StreamKey key{stream, context, {}};
  if (stream == nullptr) key.stream = CU_STREAM_LEGACY;  // 0 and CU_STREAM_LEGACY name one stream
  if (stream == CU_STREAM_PER_THREAD) key.thread = std::this_thread::get_id();
  return key;
}
}  // namespace

CUresult Pool::allocate_async(CUdeviceptr* out, std::size_t bytes, CUstream stream) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (capturing(stream)) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext current = nullptr;
  if (const CUresult r = driver_.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) return r;
  CUcontext ctx = current;
  if (driver::has_own_context(stream) && driver_.cuStreamGetCtx != nullptr)
    if (const CUresult r = driver_.cuStreamGetCtx(stream, &ctx); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // A stream of another context than the current one (of another device, say): its device serves
  // it, and what the allocation asks the driver (its free memory, for one) is asked in its context.
  std::optional<driver::ContextScope> in;
  if (ctx != current) {
    in.emplace(driver_, ctx);
    if (in->status() != CUDA_SUCCESS) return in->status();
  }
  int device = -1;
  if (const CUresult r = device_of_current(ctx, &device); r != CUDA_SUCCESS) return r;
  DevicePool* p = device_pool(device);
  if (p == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return p->allocate_async(out, bytes, ctx, stream_key(stream, ctx));
}

namespace {
// The device pool a descriptor belongs to (descriptors are never freed, so reading one is safe).
DevicePool* owner_of(Entry e) {
  if (DevicePool* p = as_carved(e)) return p;
  if (const Slab* s = as_slab(e)) return s->owner;
  return reinterpret_cast<const Block*>(e)->owner;
}
}  // namespace

Ownership Pool::deallocate(CUdeviceptr p, CUresult* result) {
  const Entry e = devices_->map.lookup(p);
  if (e == 0) return guard_refuses_free(config_.guard, devices_->map, p, result) ? Ownership::Ours : Ownership::Foreign;
  DevicePool* owner = owner_of(e);
  if (owner == nullptr) return Ownership::Foreign;
  if (held_already(p, result)) return Ownership::Ours;
  if (const std::optional<CUresult> held = hold_during_capture(owner, e, p, nullptr)) {
    *result = *held;
    return Ownership::Ours;
  }
  *result = owner->deallocate(e, p);
  release_held();  // a capture whose end the hooks did not see is over by now, maybe
  return Ownership::Ours;
}

bool Pool::held_already(CUdeviceptr p, CUresult* result) {
  if (devices_->held.empty() || !devices_->held.holds(p)) return false;
  log::error("free of {:#x}: already freed (double free); ignored", p);
  *result = CUDA_ERROR_INVALID_VALUE;
  return true;
}

std::optional<CUresult> Pool::hold_during_capture(DevicePool* owner, Entry e, CUdeviceptr p, CUcontext wait_for) {
  if (!devices_->captures.any() || process_exiting()) return std::nullopt;
  const std::optional<AllocationInfo> info = owner->describe(e, p);
  if (!info || info->base != p) return std::nullopt;  // not a live allocation's start: the free says what is wrong
  // The context the free's wait before an unmap is made in (DevicePool::fence_unmap).
  CUcontext context = wait_for != nullptr ? wait_for : info->context;
  {
    driver::ContextScope in(driver_, context);
    if (in.status() != CUDA_SUCCESS || !devices_->captures.under_way(context)) return std::nullopt;
  }
  if (!devices_->held.hold(p, context)) {  // another thread's free of it came first
    log::error("free of {:#x}: already freed (double free); ignored", p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  log::debug("free of {:#x} while a graph capture is under way in its context: held until the capture is over", p);
  return CUDA_SUCCESS;
}

void Pool::release_held(CUcontext destroying) {
  if (devices_->held.empty()) return;
  const auto capturing = [this](CUcontext context) {
    driver::ContextScope in(driver_, context);
    return in.status() == CUDA_SUCCESS && devices_->captures.under_way(context);
  };
  for (const HeldFrees::Held& h : devices_->held.take(capturing, destroying)) {
    const Entry e = devices_->map.lookup(h.p);
    DevicePool* owner = e != 0 ? owner_of(e) : nullptr;
    const CUresult r = owner != nullptr ? owner->deallocate(e, h.p, h.context) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) log::warn("free of {:#x}, held during a graph capture: error {} when made", h.p, static_cast<int>(r));
  }
}

Ownership Pool::deallocate_async(CUdeviceptr p, CUstream stream, CUresult* result) {
  const Entry e = devices_->map.lookup(p);
  if (e == 0) return guard_refuses_free(config_.guard, devices_->map, p, result) ? Ownership::Ours : Ownership::Foreign;
  DevicePool* owner = owner_of(e);
  if (owner == nullptr) return Ownership::Foreign;
  if (held_already(p, result)) return Ownership::Ours;
  // The free's event is recorded on the stream, which takes an event of the stream's own context.
  CUcontext ctx = nullptr;
  if (const CUresult r = driver::stream_context(driver_, stream, &ctx); r != CUDA_SUCCESS || ctx == nullptr) {
    *result = r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_CONTEXT;  // nothing freed, as the driver would
    return Ownership::Ours;
  }
  const bool captured = capturing(stream);
  // Guard mode unmaps at once after waiting for the stream's context, which a capture there refuses.
  if (config_.guard && !captured)
    if (const std::optional<CUresult> held = hold_during_capture(owner, e, p, ctx)) {
      *result = *held;
      return Ownership::Ours;
    }
  *result = owner->deallocate_async(e, p, stream_key(stream, ctx), captured);
  return Ownership::Ours;
}

void Pool::stream_destroying(CUstream stream) {
  // The legacy and per-thread streams cannot be destroyed (the driver refuses them).
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return;
  for (auto& slot : devices_->pools) {
    if (DevicePool* p = slot.load(std::memory_order_acquire)) p->seal_stream(stream);
  }
}

void Pool::capture_beginning(CUstream stream) {
  CUcontext context = nullptr;
  // The legacy and per-thread streams are the current context's; a stream's own is asked.
  const bool named = stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
  const CUresult r = named && driver_.cuStreamGetCtx != nullptr ? driver_.cuStreamGetCtx(stream, &context)
                                                                  : driver_.cuCtxGetCurrent(&context);
  // Under way for other threads from here, so that their frees are held (held_frees.h); then the wait
  // for what was freed so far, which this thread may still make (the driver has not begun it).
  if (r == CUDA_SUCCESS && context != nullptr) devices_->captures.beginning(context, stream);
  fence_freed();
}

void Pool::capture_begun(CUstream stream, CUresult began) { devices_->captures.begun(stream, began == CUDA_SUCCESS); }

void Pool::capture_ended(CUstream stream) {
  devices_->captures.ended(stream);
  release_held();
}

void Pool::context_destroying(CUcontext context) {
  release_held(context);  // its captures go with it
  for (auto& slot : devices_->pools) {
    if (DevicePool* p = slot.load(std::memory_order_acquire)) p->forget_context(context);
  }
}

std::optional<AllocationInfo> Pool::find(CUdeviceptr p) const {
  const Entry e = devices_->map.lookup(p);
  if (e == 0) return std::nullopt;
  DevicePool* owner = owner_of(e);
  if (owner == nullptr) return std::nullopt;
  std::optional<AllocationInfo> info = owner->describe(e, p);
  if (info && freed_but_held(info->base)) return std::nullopt;
  return info;
}

std::optional<ChunkView> Pool::chunks_of(CUdeviceptr p) const {
  const Entry e = devices_->map.lookup(p);
  if (e == 0) return std::nullopt;
  DevicePool* owner = owner_of(e);
  if (owner == nullptr) return std::nullopt;
  std::optional<ChunkView> view = owner->chunks_of(e, p);
  if (view && freed_but_held(view->info.base)) return std::nullopt;
  return view;
}

// A free held through a capture (held_frees.h) is, to the program and to every lookup, a free: the
// pointer no longer names an allocation (the driver's pointer queries call it invalid), the mover
// leaves it alone, and only the pool still keeps its memory mapped and unused until the capture ends.
bool Pool::freed_but_held(CUdeviceptr base) const {
  return !devices_->held.empty() && devices_->held.holds(base);
}

CUresult Pool::prepare_move(CUdeviceptr p, std::size_t bytes, Tier to, Move* out, MoveWaits waits) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = Move{};
  const Entry e = devices_->map.lookup(p);
  DevicePool* owner = e != 0 ? owner_of(e) : nullptr;
  if (owner == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return owner->prepare_move(p, bytes, to, out, waits);
}

namespace {
// The device pool a prepared move belongs to.
DevicePool* mover(const Move& m) { return m.owner != 0 ? owner_of(m.owner) : nullptr; }
}  // namespace

CUresult Pool::copy_move(Move& move, CUstream stream, std::uint64_t frees_before) {
  if (move.staging == 0) return CUDA_SUCCESS;  // nothing to move
  DevicePool* p = mover(move);
  return p != nullptr ? p->copy_move(move, stream, frees_before) : CUDA_ERROR_INVALID_VALUE;
}

CUresult Pool::commit_move(Move* move) {
  if (move == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (move->staging == 0) return CUDA_SUCCESS;
  DevicePool* p = mover(*move);
  return p != nullptr ? p->commit_move(move) : CUDA_ERROR_INVALID_VALUE;
}

void Pool::abort_move(Move* move) {
  if (move == nullptr || move->staging == 0) return;
  if (DevicePool* p = mover(*move)) p->abort_move(move);
}

void Pool::commit_quiesced(int device, std::span<Move* const> moves, const Quiesce& quiesce,
                           std::span<CUresult> results, const CopyReady& ready) {
  DevicePool* p = device >= 0 && device < device_count() ? device_pool(device) : nullptr;
  const bool ours = p != nullptr && results.size() >= moves.size() &&
                    std::all_of(moves.begin(), moves.end(), [&](const Move* m) {
                      return m != nullptr && (m->staging == 0 || (m->device == device && mover(*m) == p));
                    });
  if (!ours) {  // every move still ends: none stays claimed
    for (Move* m : moves) abort_move(m);
    for (std::size_t i = 0; i < results.size(); ++i) results[i] = CUDA_ERROR_INVALID_VALUE;
    return;
  }
  p->commit_quiesced(moves, quiesce, results, ready);
}

std::uint64_t Pool::promotion_room(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  DevicePool* p = devices_->pools[device].load(std::memory_order_acquire);
  return p != nullptr ? p->promotion_room() : 0;
}

std::optional<CUdeviceptr> Pool::promotable_end(int device, CUdeviceptr from, std::uint64_t room) {
  if (device < 0 || device >= kMaxDevices) return std::nullopt;
  DevicePool* p = devices_->pools[device].load(std::memory_order_acquire);
  return p != nullptr ? p->promotable_end(from, room) : std::nullopt;
}

bool Pool::in_pool_space(CUdeviceptr p) const { return devices_->map.contains(p); }

Pool::Probe Pool::probe(CUdeviceptr p) const {
  const AddressMap::Probe hit = devices_->map.probe(p);
  return {hit.entry, hit.host, hit.granule_end};
}

std::optional<std::pair<CUdeviceptr, CUdeviceptr>> Pool::whole_pieces(int device, CUdeviceptr from, CUdeviceptr end) {
  if (device < 0 || device >= kMaxDevices) return std::nullopt;
  DevicePool* p = devices_->pools[device].load(std::memory_order_acquire);
  return p != nullptr ? p->whole_pieces(from, end) : std::nullopt;
}

std::optional<Pool::CarvedSlots> Pool::carved_slots(CUdeviceptr from, CUdeviceptr end) const {
  const DevicePool* carved = as_carved(probe(from).owner);
  if (carved == nullptr || end <= from) return std::nullopt;
  const CUdeviceptr first_end = carved->carved_slot_end(from);
  if (first_end == 0) return std::nullopt;
  const std::size_t slot = carved->carved_slot_bytes();
  return CarvedSlots{first_end - slot, carved->carved_slot_end(end - 1), slot};
}

std::vector<AllocationInfo> Pool::carved_slot_allocations(CUdeviceptr from, CUdeviceptr end) const {
  DevicePool* carved = as_carved(probe(from).owner);
  const std::optional<CarvedSlots> slots = carved_slots(from, end);
  if (carved == nullptr || !slots) return {};
  std::vector<AllocationInfo> live = carved->describe_carved_within(slots->start, slots->end);
  std::erase_if(live, [&](const AllocationInfo& a) { return freed_but_held(a.base); });
  return live;
}

std::vector<std::pair<CUdeviceptr, std::size_t>> Pool::runs_in_tier(CUdeviceptr from, CUdeviceptr end, Tier tier) const {
  std::vector<std::pair<CUdeviceptr, std::size_t>> runs;
  const bool want_host = tier == Tier::Host;
  CUdeviceptr run = 0;
  CUdeviceptr at = from;
  while (at < end) {
    const Probe hit = probe(at);
    if (hit.owner == 0) break;
    const CUdeviceptr next = std::min<CUdeviceptr>(std::max<CUdeviceptr>(hit.granule_end, at + 1), end);
    if (hit.host == want_host && run == 0) run = at;
    if (hit.host != want_host && run != 0) {
      runs.emplace_back(run, at - run);
      run = 0;
    }
    // Carved memory moves a slot at a time (carved_moves.cpp): a run ends where its slot does.
    if (const DevicePool* carved = as_carved(hit.owner); carved != nullptr && run != 0 && next < end &&
                                                          next == carved->carved_slot_end(at)) {
      runs.emplace_back(run, next - run);
      run = 0;
    }
    at = next;
  }
  if (run != 0) runs.emplace_back(run, at - run);
  return runs;
}

bool Pool::any_host_mapped() const { return devices_->map.host_granules() != 0; }

CUresult Pool::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  int device = -1;
  CUcontext ctx = nullptr;
  if (const CUresult r = current_device(&device, &ctx); r != CUDA_SUCCESS) return r;
  DevicePool* p = device_pool(device);
  if (p == nullptr) return driver_.cuMemGetInfo_v2(free_bytes, total_bytes);
  std::size_t free_b = 0, total_b = 0;
  if (const CUresult r = p->memory_info(&free_b, &total_b); r != CUDA_SUCCESS) return r;
  if (config_.report_host && host_) {
    // Pinned memory waiting in reserves, premapped or in cached mappings is as good as free.
    std::uint64_t reserved = 0;
    for (int i = 0; i < kMaxDevices; ++i) {
      if (DevicePool* q = devices_->pools[i].load(std::memory_order_acquire)) {
        const DeviceStats s = q->stats();
        reserved += (s.host_chunks_reserve + s.host_chunks_premapped + s.host_chunks_cached) * s.chunk_size;
      }
    }
    const std::uint64_t in_use = host_->charged() > reserved ? host_->charged() - reserved : 0;
    const std::uint64_t host_free = host_->limit() > in_use ? host_->limit() - in_use : 0;
    const std::uint64_t chunk = p->stats().chunk_size;
    free_b += host_free - host_free % chunk;
    total_b += host_->limit();
  }
  if (free_bytes != nullptr) *free_bytes = free_b;
  if (total_bytes != nullptr) *total_bytes = total_b;
  return CUDA_SUCCESS;
}

CUresult Pool::create_external(Handle* handle, std::size_t size, const CUmemAllocationProp* prop,
                               unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return driver_.cuMemCreate(handle, size, prop, flags);
  }
  DevicePool* p = device_pool(prop->location.id);
  if (p == nullptr) return driver_.cuMemCreate(handle, size, prop, flags);
  Tier tier = Tier::Device;
  if (const CUresult r = p->admit_external(size, &tier); r != CUDA_SUCCESS) return r;
  CUresult r = CUDA_SUCCESS;
  if (tier == Tier::Device) {
    r = driver_.cuMemCreate(handle, size, prop, flags);
  } else {
    // Pinned host memory at the device's NUMA node instead; the program maps it and gives the
    // device access exactly as it would device memory. What only device memory has goes: first
    // compression, then the RDMA and usage flags, last the requested handle types (so such a handle
    // cannot be exported: the price of overcommitting a program that asked for IPC).
    CUmemAllocationProp actual = *prop;
    actual.location = p->host_location();
    actual.allocFlags.compressionType = 0;
    r = driver_.cuMemCreate(handle, size, &actual, flags);
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
      actual.allocFlags = {};
      r = driver_.cuMemCreate(handle, size, &actual, flags);
    }
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
      actual.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
      r = driver_.cuMemCreate(handle, size, &actual, flags);
      if (r == CUDA_SUCCESS) log::info("cuMemCreate in host memory without the requested handle types {:#x}", static_cast<unsigned>(prop->requestedHandleTypes));
    }
  }
  if (r != CUDA_SUCCESS) {
    p->external_released(size, tier);
    // The program asked for device memory: failing to pin instead is, to it, an out-of-memory.
    if (tier == Tier::Host) {
      log::warn("device {}: cuMemCreate of {} MiB: the device limit is reached and pinning host memory instead failed ({})",
                prop->location.id, size >> 20, static_cast<int>(r));
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
  }
  uncount_external(devices_->externals.created(*handle, ExternalHandles::Counted{prop->location.id, size, tier, *prop}));
  return CUDA_SUCCESS;
}

void Pool::uncount_external(const std::optional<ExternalHandles::Counted>& ended) {
  if (!ended) return;
  if (DevicePool* p = device_pool(ended->device)) p->external_released(ended->bytes, ended->tier);
}

std::uint64_t Pool::releasing_external(Handle handle) const { return devices_->externals.releasing(handle); }

void Pool::released_external(std::uint64_t memory) { uncount_external(devices_->externals.released(memory)); }

void Pool::retained_external(Handle handle, CUdeviceptr at) { devices_->externals.retained(handle, at); }

void Pool::mapped_external(CUdeviceptr va, std::size_t size, Handle handle) {
  uncount_external(devices_->externals.mapped(va, size, handle));
}

void Pool::unmapped_external(CUdeviceptr va, std::size_t size) {
  for (const ExternalHandles::Counted& ended : devices_->externals.unmapped(va, size)) uncount_external(ended);
}

std::size_t Pool::external_handles_live() const { return devices_->externals.live(); }

std::optional<CUmemAllocationProp> Pool::requested_properties(Handle handle) const {
  const auto counted = devices_->externals.find(handle);
  if (!counted || counted->tier != Tier::Host) return std::nullopt;
  return counted->requested;
}

CUresult Pool::fill_host_reserve(int device, std::size_t bytes) {
  DevicePool* p = device_pool(device);
  return p == nullptr ? CUDA_ERROR_INVALID_DEVICE : p->fill_host_reserve(bytes);
}

void Pool::release_idle(bool keep_chunks) {
  for (auto& slot : devices_->pools) {
    if (DevicePool* p = slot.load(std::memory_order_acquire)) p->release_idle(keep_chunks);
  }
}

bool Pool::fence_due() const {
  for (const auto& slot : devices_->pools) {
    if (const DevicePool* p = slot.load(std::memory_order_acquire); p != nullptr && p->fence_due()) return true;
  }
  return false;
}

void Pool::fence_freed() {
  for (auto& slot : devices_->pools) {
    if (DevicePool* p = slot.load(std::memory_order_acquire); p != nullptr && p->fence_due()) p->fence_freed();
  }
}

DeviceStats Pool::stats(int device) const {
  if (device < 0 || device >= kMaxDevices) return {};
  DevicePool* p = devices_->pools[device].load(std::memory_order_acquire);
  return p == nullptr ? DeviceStats{} : p->stats();
}

std::string Pool::check_invariants() {
  std::string out;
  std::uint64_t host_mapped = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool* p = devices_->pools[d].load(std::memory_order_acquire);
    if (p == nullptr) continue;
    if (const std::string found = p->check_invariants(); !found.empty()) out += "device " + std::to_string(d) + ":\n" + found;
    host_mapped += p->stats().host_chunks_mapped;
  }
  if (devices_->map.host_granules() != host_mapped)
    out += "the address map marks " + std::to_string(devices_->map.host_granules()) + " granules host memory, the pools map " +
           std::to_string(host_mapped) + " host chunks\n";
  return out;
}

int Pool::device_count() const {
  int n = 0;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (devices_->pools[i].load(std::memory_order_acquire) != nullptr) n = i + 1;
  }
  return n;
}

}  // namespace uvmpool::pool
