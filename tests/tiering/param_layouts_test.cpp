// Parameter layouts (src/tiering/param_layouts.h) against a driver table of test functions: which
// call answers for which handle, what is kept, and what an unload forgets.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tiering/param_layouts.h"

namespace {

using uvmpool::driver::Table;
using uvmpool::tiering::ParamLayout;
using uvmpool::tiering::ParamLayouts;

// Two handles: a "function" with parameters 0:8 8:4 and a "kernel" with 0:48; anything else unknown.
CUfunction const kFunction = reinterpret_cast<CUfunction>(0x1000);
CUkernel const kKernel = reinterpret_cast<CUkernel>(0x2000);
std::atomic<int> g_func_calls{0}, g_kernel_calls{0};

CUresult CUDAAPI func_param_info(CUfunction f, size_t i, size_t* offset, size_t* size) {
  g_func_calls.fetch_add(1);
  if (f != kFunction) return CUDA_ERROR_INVALID_HANDLE;
  if (i >= 2) return CUDA_ERROR_INVALID_VALUE;
  *offset = i == 0 ? 0 : 8;
  *size = i == 0 ? 8 : 4;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI kernel_param_info(CUkernel k, size_t i, size_t* offset, size_t* size) {
  g_kernel_calls.fetch_add(1);
  if (k != kKernel) return CUDA_ERROR_INVALID_HANDLE;
  if (i >= 1) return CUDA_ERROR_INVALID_VALUE;
  *offset = 0;
  *size = 48;
  return CUDA_SUCCESS;
}

class ParamLayoutsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table.cuFuncGetParamInfo = &func_param_info;
    table.cuKernelGetParamInfo = &kernel_param_info;
    g_func_calls = 0;
    g_kernel_calls = 0;
  }
  Table table{};
};

TEST_F(ParamLayoutsTest, FunctionsAreAnsweredByFuncGetParamInfo) {
  ParamLayouts layouts(table);
  const ParamLayout* l = layouts.find(kFunction);
  ASSERT_TRUE(l->known);
  ASSERT_EQ(l->params.size(), 2u);
  EXPECT_EQ(l->params[1].offset, 8u);
  EXPECT_EQ(l->params[1].size, 4u);
  EXPECT_EQ(g_kernel_calls.load(), 0);
}

TEST_F(ParamLayoutsTest, KernelHandlesCastToFunctionsAreAnsweredByKernelGetParamInfo) {
  ParamLayouts layouts(table);
  const ParamLayout* l = layouts.find(reinterpret_cast<CUfunction>(kKernel));
  ASSERT_TRUE(l->known);
  ASSERT_EQ(l->params.size(), 1u);
  EXPECT_EQ(l->params[0].size, 48u);
  EXPECT_GT(g_kernel_calls.load(), 0);
}

TEST_F(ParamLayoutsTest, HandlesNeitherCallKnowsHaveAnUnknownLayout) {
  ParamLayouts layouts(table);
  const ParamLayout* l = layouts.find(reinterpret_cast<CUfunction>(0x3000));
  EXPECT_FALSE(l->known);
  EXPECT_TRUE(l->params.empty());
}

TEST_F(ParamLayoutsTest, ADriverWithoutTheCallsGivesUnknownLayouts) {
  Table old{};  // before CUDA 12.4: neither entry point
  ParamLayouts layouts(old);
  EXPECT_FALSE(layouts.find(kFunction)->known);
}

TEST_F(ParamLayoutsTest, EachFunctionIsAskedOnceAcrossThreads) {
  ParamLayouts layouts(table);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        ASSERT_TRUE(layouts.find(kFunction)->known);
        ASSERT_TRUE(layouts.find(reinterpret_cast<CUfunction>(kKernel))->known);
        ASSERT_FALSE(layouts.find(reinterpret_cast<CUfunction>(0x3000))->known);  // unknown ones are kept too
      }
    });
  }
  for (auto& t : threads) t.join();
  // Threads meeting a new function at once may each ask; never more than once per thread.
  EXPECT_GE(layouts.driver_queries(), 3u);
  EXPECT_LE(layouts.driver_queries(), 12u);
}

TEST_F(ParamLayoutsTest, AnUnloadForgetsEveryLayout) {
  ParamLayouts layouts(table);
  ASSERT_TRUE(layouts.find(kFunction)->known);
  ASSERT_EQ(layouts.driver_queries(), 1u);
  ASSERT_TRUE(layouts.find(kFunction)->known);
  EXPECT_EQ(layouts.driver_queries(), 1u);  // from the per-thread table
  layouts.forget_all();
  ASSERT_TRUE(layouts.find(kFunction)->known);
  EXPECT_EQ(layouts.driver_queries(), 2u);  // the handle may name another kernel now: asked again
}

TEST_F(ParamLayoutsTest, ATableMadeWhereAnotherStoodDoesNotInheritItsAnswers) {
  auto first = std::make_unique<ParamLayouts>(table);
  ASSERT_TRUE(first->find(kFunction)->known);
  first.reset();
  Table old{};
  auto second = std::make_unique<ParamLayouts>(old);  // often at the same address
  EXPECT_FALSE(second->find(kFunction)->known);
}

}  // namespace
