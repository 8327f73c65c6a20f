// The parameter layouts of the kernel catalog (offset, size of each parameter), as docs/simulator.md
// states them: the simulator's cuFuncGetParamInfo must answer them (tests/sim/kernel_test.cpp) and
// the PTX of catalog.cu must give the same on a GPU (tests/fidelity/kernel_test.cpp).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace uvmpool::bench {

struct CatalogLayout {
  const char* name;
  std::vector<std::pair<std::size_t, std::size_t>> params;  // offset, size
};

inline const CatalogLayout kCatalogLayouts[] = {
    {"uvmpool_fill_u32", {{0, 8}, {8, 8}, {16, 4}}},
    {"uvmpool_copy", {{0, 8}, {8, 8}, {16, 8}}},
    {"uvmpool_sum_u32", {{0, 8}, {8, 8}, {16, 8}}},
    {"uvmpool_touch", {{0, 8}, {8, 8}, {16, 4}, {20, 4}}},
    {"uvmpool_gather_u32", {{0, 8}, {8, 8}, {16, 8}, {24, 8}}},
    {"uvmpool_struct_fill_u32", {{0, 48}}},
};

}  // namespace uvmpool::bench
