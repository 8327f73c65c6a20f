// The library's exports: every entry of the list under its versioned symbol, the control API, and
// nothing else; each entry reachable through cuGetProcAddress_v2 as its own export.
#include <dlfcn.h>
#include <elf.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

#include "driver/driver_api.h"  // the one list (declares every versioned symbol of cuda.h)
#include "sim/sim_control.h"
#include <gtest/gtest.h>

namespace {

using uvmpool::driver::Flavor;
using uvmpool::driver::kFunctions;

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr) return {};
  return info.dli_fname;
}

// The defined global symbols of an ELF shared object's dynamic symbol table.
std::set<std::string> defined_dynamic_symbols(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  if (image.size() < sizeof(Elf64_Ehdr)) return names;
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(image.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(image.data() + header->e_shoff);
  for (int i = 0; i < header->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const char* strings = image.data() + sections[sections[i].sh_link].sh_offset;
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(image.data() + sections[i].sh_offset);
    for (std::size_t s = 0; s < sections[i].sh_size / sizeof(Elf64_Sym); ++s) {
      const unsigned bind = ELF64_ST_BIND(symbols[s].st_info);
      if (symbols[s].st_shndx != SHN_UNDEF && (bind == STB_GLOBAL || bind == STB_WEAK))
        names.insert(strings + symbols[s].st_name);
    }
  }
  return names;
}

TEST(Exports, TheLibraryIsLibcudaSoOne) {
  const std::string path = library_path();
  ASSERT_FALSE(path.empty());
  EXPECT_TRUE(std::string_view(path).ends_with("/libcuda.so.1")) << path;
}

TEST(Exports, EveryEntryOfTheListIsExportedUnderItsSymbol) {
  for (const auto& f : kFunctions) EXPECT_NE(dlsym(RTLD_DEFAULT, f.symbol), nullptr) << f.symbol;
}

TEST(Exports, OnlyDriverSymbolsAndTheControlApiAreExported) {
  const std::set<std::string> names = defined_dynamic_symbols(library_path());
  ASSERT_FALSE(names.empty());
  std::set<std::string> expected = {"uvmpool_sim_fail",           "uvmpool_sim_call_count",   "uvmpool_sim_call_ns",
                                    "uvmpool_sim_reset_counts",   "uvmpool_sim_clear_failures",
                                    "uvmpool_sim_hold_stream",    "uvmpool_sim_set_capture_status",
                                    "uvmpool_sim_now_ns",         "uvmpool_sim_advance_host_ns",
                                    "uvmpool_sim_violations",     "uvmpool_sim_link_bytes",
                                    "uvmpool_sim_work_count",     "uvmpool_sim_reset_clock"};
  for (const auto& f : kFunctions) expected.insert(f.symbol);
  EXPECT_EQ(names, expected);
}

TEST(Exports, EveryEntryResolvesThroughGetProcAddressToItsOwnExport) {
  for (const auto& f : kFunctions) {
    const cuuint64_t flags = f.flavor == Flavor::PerThread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                           : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult found{};
    ASSERT_EQ(cuGetProcAddress_v2(f.base, &pfn, f.version, flags, &found), CUDA_SUCCESS) << f.symbol;
    EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS) << f.symbol;
    EXPECT_EQ(pfn, dlsym(RTLD_DEFAULT, f.symbol)) << f.symbol;
  }
}

}  // namespace
