// Reading a launch's argument bytes (src/tiering/launch_args.h): both forms, every word that a
// pointer could be, nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tiering/launch_args.h"

namespace {

using uvmpool::tiering::for_each_word;
using uvmpool::tiering::ParamLayout;

std::vector<std::uint64_t> words_of(const ParamLayout& layout, void** params, void** extra, bool* read = nullptr) {
  std::vector<std::uint64_t> out;
  const bool ok = for_each_word(layout, params, extra, [&](std::uint64_t w) { out.push_back(w); });
  if (read != nullptr) *read = ok;
  return out;
}

ParamLayout layout(std::initializer_list<ParamLayout::Param> params) {
  return ParamLayout{std::vector<ParamLayout::Param>(params), true};
}

// (int n, float* x, {float* a; float* b; int k}, double s): offsets 0, 8, 16 (24 bytes), 40.
struct Pair {
  std::uint64_t a, b;
  std::int32_t k;
};

TEST(LaunchArgs, KernelParamsFormVisitsEveryAlignedWordOfEveryParameter) {
  std::int32_t n = 7;
  std::uint64_t x = 0x7f0000001000;
  Pair pair{0x7f0000002000, 0x7f0000003000, 5};
  double s = 1.5;
  void* params[] = {&n, &x, &pair, &s};
  const ParamLayout l = layout({{0, 4}, {8, 8}, {16, 24}, {40, 8}});
  bool read = false;
  const auto words = words_of(l, params, nullptr, &read);
  EXPECT_TRUE(read);
  std::uint64_t s_bits;
  std::memcpy(&s_bits, &s, 8);
  // n (4 bytes) is no pointer; the struct's last word holds k and its padding.
  ASSERT_EQ(words.size(), 5u);
  EXPECT_EQ(words[0], x);
  EXPECT_EQ(words[1], pair.a);
  EXPECT_EQ(words[2], pair.b);
  EXPECT_EQ(words[4], s_bits);
}

TEST(LaunchArgs, WordsAreAlignedInTheBufferNotInTheParameter) {
  // (int a, int b, {int c; int d; uint64 p}) packed at 0, 4, 8: the struct starts 8-aligned. A
  // 12-byte parameter at offset 4 holds one aligned word, at buffer offset 8.
  unsigned char bytes[12] = {};
  const std::uint64_t p = 0x1122334455667788;
  std::memcpy(bytes + 4, &p, 8);
  void* params[] = {bytes};
  const auto words = words_of(layout({{4, 12}}), params, nullptr);
  ASSERT_EQ(words.size(), 1u);
  EXPECT_EQ(words[0], p);
}

TEST(LaunchArgs, ATmaDescriptorPassedByValueShowsItsAddress) {
  // A CUtensorMap (128 bytes, 64-aligned) after a pointer: measured on an H100 with driver 580
  // (tests/gpu/tensormap_layout.py, docs/tiering.md), every descriptor cuTensorMapEncodeTiled,
  // cuTensorMapEncodeIm2col or cuTensorMapReplaceAddress wrote holds its global address as word 0,
  // as it is. These are that run's words for a rank-2 float32 map.
  alignas(64) std::uint64_t map[16] = {0x7fd212000000, 0x4000000390, 0, 0, 0xff000000ff, 0, 0x1f00000000000000,
                                       0x1f, 0x1000, 0x10, 0, 0, 0, 0, 0, 0};
  std::uint64_t out = 0x7f0000004000;
  void* params[] = {&out, map};
  const std::vector<std::uint64_t> w = words_of(layout({{0, 8}, {64, 128}}), params, nullptr);
  ASSERT_EQ(w.size(), 17u);
  EXPECT_EQ(w[0], out);
  EXPECT_EQ(w[1], 0x7fd212000000u) << "the descriptor's address is a word the hooks look up";
}

TEST(LaunchArgs, KernelParamsWithoutALayoutCannotBeRead) {
  std::uint64_t x = 1;
  void* params[] = {&x};
  ParamLayout unknown;
  bool read = true;
  EXPECT_TRUE(words_of(unknown, params, nullptr, &read).empty());
  EXPECT_FALSE(read);
}

TEST(LaunchArgs, ExtraFormVisitsTheWholeBufferWithOrWithoutALayout) {
  std::uint64_t buffer[3] = {0xa, 0xb, 0xc};
  std::size_t size = sizeof buffer;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  bool read = false;
  EXPECT_EQ(words_of(ParamLayout{}, nullptr, extra, &read), (std::vector<std::uint64_t>{0xa, 0xb, 0xc}));
  EXPECT_TRUE(read);
  size = 20;  // a partial last word is no pointer
  EXPECT_EQ(words_of(ParamLayout{}, nullptr, extra), (std::vector<std::uint64_t>{0xa, 0xb}));
}

TEST(LaunchArgs, MalformedExtraListsAreNotRead) {
  std::uint64_t buffer[1] = {0xa};
  std::size_t size = 8;
  bool read = true;
  void* no_buffer[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  EXPECT_TRUE(words_of(ParamLayout{}, nullptr, no_buffer, &read).empty());
  EXPECT_FALSE(read);
  void* unknown_key[] = {reinterpret_cast<void*>(0x77), buffer, CU_LAUNCH_PARAM_END};
  EXPECT_TRUE(words_of(ParamLayout{}, nullptr, unknown_key, &read).empty());
  EXPECT_FALSE(read);
  void* null_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, nullptr, CU_LAUNCH_PARAM_END};
  EXPECT_TRUE(words_of(ParamLayout{}, nullptr, null_size, &read).empty());
  EXPECT_FALSE(read);
}

TEST(LaunchArgs, NoArgumentsAtAllIsReadAsNothing) {
  bool read = false;
  EXPECT_TRUE(words_of(layout({}), nullptr, nullptr, &read).empty());
  EXPECT_TRUE(read);
}

}  // namespace
