#include "tiering/unlearned_step.h"

#include <fmt/format.h>

#include <string_view>

namespace uvmpool::tiering {

std::string unlearned_step_warning(std::uint64_t launches, bool dropped, const char* alloc_conf, const char* no_caching) {
  std::string set;
  if (alloc_conf != nullptr && std::string_view(alloc_conf).find("cudaMallocAsync") != std::string_view::npos)
    set = fmt::format(" (PYTORCH_CUDA_ALLOC_CONF={} is set)", alloc_conf);
  else if (no_caching != nullptr && std::string_view(no_caching) != "" && std::string_view(no_caching) != "0")
    set = fmt::format(" (PYTORCH_NO_CUDA_MEMORY_CACHING={} is set)", no_caching);
  return fmt::format(
      "tiering: no repeating launch sequence {} {} launches while memory is spilled: nothing is moved "
      "ahead of its use (recency moves memory only after it is touched), and most spilled memory is read in "
      "place over PCIe. The usual cause is allocations that change address from one step to the next, as when "
      "a program's frees reach uvmpool{}; PyTorch's default caching allocator keeps them in place "
      "(docs/tiering.md, \"Frees that reach the pool\")",
      dropped ? "held (the one learned was dropped) for the last" : "learned in", launches, set);
}

}  // namespace uvmpool::tiering
