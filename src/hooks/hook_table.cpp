#include <atomic>

#include "hooks/hooks.h"

namespace uvmpool::hooks {
namespace {

driver::Table make_hook_table() {
  driver::Table t;
#define UVMPOOL_X(base, symbol, version, flavor, kind, params, args) UVMPOOL_IF_##kind(t.symbol = &guarded::symbol;)
  UVMPOOL_DRIVER_FUNCTIONS(UVMPOOL_X)
#undef UVMPOOL_X
  return t;
}

std::atomic<bool> g_disabled{false};

}  // namespace

const driver::Table& hook_table() {
  static const driver::Table table = make_hook_table();
  return table;
}

bool hands_out(int entry) {
  if (entry < 0 || driver::kFunctions[entry].kind != driver::Kind::Hook) return false;
  return !is_launch_hook(static_cast<driver::Fn>(entry)) || watches_launches();
}

bool disabled() { return g_disabled.load(std::memory_order_relaxed); }
void set_disabled(bool value) { g_disabled.store(value, std::memory_order_relaxed); }

}  // namespace uvmpool::hooks
