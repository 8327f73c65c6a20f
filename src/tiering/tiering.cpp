#include "tiering/tiering.h"

#include <mutex>

#include "config/options.h"
#include "driver/real_driver.h"
#include "tiering/launch_args.h"

namespace uvmpool::tiering {
namespace {

std::atomic<Tiering*> g_process{nullptr};
std::mutex g_process_mu;

}  // namespace

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "off") return Mode::Off;
  if (text == "remote") return Mode::Remote;
  if (text == "auto" || text.empty()) return Mode::Auto;
  return std::nullopt;
}

Mode configured_mode() {
  const config::Options& o = config::options();
  if (o.disable || !o.pool) return Mode::Off;
  return parse_mode(o.tiering).value_or(Mode::Auto);  // the option table refuses other values
}

Tiering::Tiering(const driver::Table& driver, pool::Pool& pool, Mode mode)
    : pool_(pool), mode_(mode), layouts_(driver) {}

Tiering* Tiering::process() {
  if (Tiering* t = g_process.load(std::memory_order_acquire)) return t;
  pool::Pool* pool = pool::Pool::existing();  // no pool yet: no pool memory for a kernel to touch
  if (pool == nullptr) return nullptr;
  static const Mode mode = configured_mode();
  if (mode == Mode::Off) return nullptr;
  std::lock_guard lock(g_process_mu);
  if (Tiering* t = g_process.load(std::memory_order_relaxed)) return t;
  const driver::RealDriver* real = driver::real();
  if (real == nullptr) return nullptr;
  auto* t = new Tiering(real->table, *pool, mode);  // never destroyed: launches may come during exit
  g_process.store(t, std::memory_order_release);
  return t;
}

Tiering* Tiering::existing() { return g_process.load(std::memory_order_acquire); }

void Tiering::before_launch(CUfunction f, CUstream stream, void** params, void** extra) {
  // The common case when everything fits: nothing in host memory, nothing to see.
  if (f == nullptr || !pool_.any_host_mapped()) return;
  LaunchTouches touches;
  const ParamLayout& layout = *layouts_.find(f);
  const bool read = for_each_word(layout, params, extra, [&](std::uint64_t word) {
    const pool::Pool::Probe hit = pool_.probe(static_cast<CUdeviceptr>(word));
    if (hit.owner != 0) touches.add({static_cast<CUdeviceptr>(word), hit.owner, hit.host});
  });
  if (!read) {
    launches_unread_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  launches_read_.fetch_add(1, std::memory_order_relaxed);
  if (touches.count != 0) {
    pointers_.fetch_add(touches.count + touches.dropped, std::memory_order_relaxed);
    if (touches.host != 0) {
      host_pointers_.fetch_add(touches.host, std::memory_order_relaxed);
      launches_in_place_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (Observer o = observer_.load(std::memory_order_acquire))
    o(observer_context_.load(std::memory_order_relaxed), f, stream, touches);
}

void Tiering::set_observer(Observer observer, void* context) {
  observer_context_.store(context, std::memory_order_relaxed);
  observer_.store(observer, std::memory_order_release);
}

Stats Tiering::stats() const {
  Stats s;
  s.launches_read = launches_read_.load(std::memory_order_relaxed);
  s.launches_unread = launches_unread_.load(std::memory_order_relaxed);
  s.pointers = pointers_.load(std::memory_order_relaxed);
  s.host_pointers = host_pointers_.load(std::memory_order_relaxed);
  s.launches_in_place = launches_in_place_.load(std::memory_order_relaxed);
  s.layouts_asked = layouts_.driver_queries();
  return s;
}

}  // namespace uvmpool::tiering
