// A failed UVMPOOL_CHECK (checks.h).
#include "config/checks.h"

#include <cstdlib>

#include "config/log.h"

namespace uvmpool {

void check_failed(const char* condition, const char* what, const char* file, int line) noexcept {
  log::error("internal check failed at {}:{}: {} ({}); aborting", file, line, what, condition);
  std::abort();
}

}  // namespace uvmpool
