// A runtime-like program (every driver function from cuGetProcAddress) that builds a graph node by node
// on spilled memory, through every node call that can name device memory: kernel nodes in CUDA 11's
// and CUDA 12's parameters, memcpy, memset and memory-operation nodes, and cuGraphAddNode's kernel,
// memcpy, memset, empty and host nodes; instantiates it through the name "cuGraphInstantiate" (the
// five-parameter form the driver answers it with); launches it, changes its nodes in the executable
// graph (typed and generic set calls) and launches it again. Past UVMPOOL_DEVICE_LIMIT=64M each buffer
// below is its own allocation in host memory, so each one the hooks followed is one host pointer of the
// graph's launch. Then the stream memory operations (cuStreamWriteValue32, cuStreamWaitValue64 and a
// cuStreamBatchMemOp) on those buffers, each shown to tiering as a transfer. It checks every value
// written, then prints, for the hooks tests (tests/hooks/CMakeLists.txt) and the GPU suite
// (scripts/gpu-suite.sh):
//   graph nodes client: ok; node hook calls <n>; graph_launches_read <n>; graph_launches_unread <n>;
//   host pointers <first launch> then <second launch>; memory operations shown <n> in place <n>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "getproc_client.h"
#include "kernels/catalog_ptx.h"

namespace {

constexpr std::size_t kWords = 1024;         // 4 KiB of each buffer written
constexpr std::size_t kBuffer = 2u << 20;    // each its own mapping (smaller ones may share a slab)
void* libcuda = nullptr;

long long host_pointers() { return uvmpool_figure(libcuda, "launch_host_pointers"); }

}  // namespace

int main() {
  CUdevice dev = 0;
  libcuda = open_driver_as_runtime(&dev);
  namespace s = uvmpool::driver::sig;
  auto mem_alloc = resolve<s::cuMemAlloc_v2>("cuMemAlloc", 3020);
  auto memset32 = resolve<s::cuMemsetD32_v2>("cuMemsetD32", 3020);
  auto dtoh = resolve<s::cuMemcpyDtoH_v2>("cuMemcpyDtoH", 3020);
  auto sync = resolve<s::cuCtxSynchronize>("cuCtxSynchronize", 2000);
  auto get_current = resolve<s::cuCtxGetCurrent>("cuCtxGetCurrent", 4000);
  auto load = resolve<s::cuModuleLoadData>("cuModuleLoadData", 2000);
  auto get_function = resolve<s::cuModuleGetFunction>("cuModuleGetFunction", 2000);
  auto graph_create = resolve<s::cuGraphCreate>("cuGraphCreate", 10000);
  auto add_kernel_v1 = resolve<s::cuGraphAddKernelNode>("cuGraphAddKernelNode", 11000);
  auto add_kernel = resolve<s::cuGraphAddKernelNode_v2>("cuGraphAddKernelNode", 12000);
  auto add_memcpy = resolve<s::cuGraphAddMemcpyNode>("cuGraphAddMemcpyNode", 10000);
  auto add_memset = resolve<s::cuGraphAddMemsetNode>("cuGraphAddMemsetNode", 10000);
  auto add_mem_op = resolve<s::cuGraphAddBatchMemOpNode>("cuGraphAddBatchMemOpNode", 11070);
  auto exec_mem_op = resolve<s::cuGraphExecBatchMemOpNodeSetParams>("cuGraphExecBatchMemOpNodeSetParams", 11070);
  auto write_value = resolve<s::cuStreamWriteValue32_v2>("cuStreamWriteValue32", 11070);
  auto wait_value64 = resolve<s::cuStreamWaitValue64_v2>("cuStreamWaitValue64", 11070);
  auto batch_mem_op = resolve<s::cuStreamBatchMemOp_v2>("cuStreamBatchMemOp", 11070);
  auto add_node = resolve<s::cuGraphAddNode_v2>("cuGraphAddNode", 12030);
  auto exec_memcpy = resolve<s::cuGraphExecMemcpyNodeSetParams>("cuGraphExecMemcpyNodeSetParams", 10020);
  auto exec_node = resolve<s::cuGraphExecNodeSetParams>("cuGraphExecNodeSetParams", 12020);
  auto exec_kernel_v1 = resolve<s::cuGraphExecKernelNodeSetParams>("cuGraphExecKernelNodeSetParams", 11000);
  // Asked by its old name at CUDA 12, the driver answers with CUDA 11's five-parameter form.
  auto instantiate = resolve<s::cuGraphInstantiate_v2>("cuGraphInstantiate", 12000);
  auto graph_launch = resolve<s::cuGraphLaunch>("cuGraphLaunch", 10000);
  auto exec_destroy = resolve<s::cuGraphExecDestroy>("cuGraphExecDestroy", 10000);
  auto graph_destroy = resolve<s::cuGraphDestroy>("cuGraphDestroy", 10000);

  // The device's 64 MiB taken, then twelve buffers in host memory.
  CUdeviceptr device_part = 0;
  CU(mem_alloc(&device_part, 64u << 20));
  std::vector<CUdeviceptr> b(12);
  for (CUdeviceptr& p : b) {
    CU(mem_alloc(&p, kBuffer));
    CU(memset32(p, 0, kWords));
  }
  CUcontext ctx = nullptr;
  CU(get_current(&ctx));
  CUmodule module = nullptr;
  // The simulator answers its own catalog for its image; a real driver refuses it and gets the PTX.
  if (load(&module, "uvmpool-sim-module 1\n") != CUDA_SUCCESS) CU(load(&module, uvmpool::bench::kCatalogPtx));
  CUfunction fill = nullptr;
  CU(get_function(&fill, module, "uvmpool_fill_u32"));

  std::uint64_t count = kWords;
  CUdeviceptr dst[3] = {b[0], b[1], b[4]};
  std::uint32_t value[3] = {10, 11, 14};
  void* params[3][3];
  for (int i = 0; i < 3; ++i) {
    params[i][0] = &dst[i];
    params[i][1] = &count;
    params[i][2] = &value[i];
  }
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = fill;
  k.gridDimX = k.gridDimY = k.gridDimZ = 1;
  k.blockDimX = 32;
  k.blockDimY = k.blockDimZ = 1;
  auto copy_of = [](CUdeviceptr to, CUdeviceptr from) {
    CUDA_MEMCPY3D c{};
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = from;
    c.dstDevice = to;
    c.WidthInBytes = kWords * 4;
    c.Height = c.Depth = 1;
    return c;
  };

  // One chain: b0 = 10 (CUDA 12 kernel node), b1 = 11 (CUDA 11's), b2 = b0 (memcpy), b3 = 13 (memset);
  // generic: b4 = 14 (kernel), b5 = b4 (memcpy), b6 = 16 (memset), an empty node, a host node; then
  // b10's first word = 20 (a memory-operation node).
  CUgraph graph = nullptr;
  CU(graph_create(&graph, 0));
  std::vector<CUgraphNode> n(10);
  k.kernelParams = params[0];
  CU(add_kernel(&n[0], graph, nullptr, 0, &k));
  k.kernelParams = params[1];
  CUDA_KERNEL_NODE_PARAMS_v1 k1{};
  std::memcpy(&k1, &k, sizeof k1);  // CUDA 12's fields begin with CUDA 11's
  CU(add_kernel_v1(&n[1], graph, &n[0], 1, &k1));
  const CUDA_MEMCPY3D copy = copy_of(b[2], b[0]);
  CU(add_memcpy(&n[2], graph, &n[1], 1, &copy, ctx));
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = b[3];
  set.value = 13;
  set.elementSize = 4;
  set.width = kWords;
  set.height = 1;
  CU(add_memset(&n[3], graph, &n[2], 1, &set, ctx));
  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_KERNEL;
  k.kernelParams = params[2];
  std::memcpy(&g.kernel, &k, sizeof k);
  CU(add_node(&n[4], graph, &n[3], nullptr, 1, &g));
  g = {};
  g.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  g.memcpy.copyCtx = ctx;
  g.memcpy.copyParams = copy_of(b[5], b[4]);
  CU(add_node(&n[5], graph, &n[4], nullptr, 1, &g));
  g = {};
  g.type = CU_GRAPH_NODE_TYPE_MEMSET;
  g.memset = {b[6], 0, 16, 4, kWords, 1, ctx};
  CU(add_node(&n[6], graph, &n[5], nullptr, 1, &g));
  g = {};
  g.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CU(add_node(&n[7], graph, &n[6], nullptr, 1, &g));
  static int host_runs = 0;
  g = {};
  g.type = CU_GRAPH_NODE_TYPE_HOST;
  g.host.fn = [](void* runs) { ++*static_cast<int*>(runs); };
  g.host.userData = &host_runs;
  CU(add_node(&n[8], graph, &n[7], nullptr, 1, &g));
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = b[10];
  op.writeValue.value = 20;
  CUDA_BATCH_MEM_OP_NODE_PARAMS m{ctx, 1, &op, 0};
  CU(add_mem_op(&n[9], graph, &n[8], 1, &m));

  CUgraphExec exec = nullptr;
  CU(instantiate(&exec, graph, nullptr, nullptr, 0));
  const long long before = host_pointers();
  CU(graph_launch(exec, nullptr));
  CU(sync());
  const long long first = host_pointers() - before;
  const std::uint32_t want[7] = {10, 11, 10, 13, 14, 14, 16};
  std::vector<std::uint32_t> got(kWords);
  for (int i = 0; i < 7; ++i) {
    CU(dtoh(got.data(), b[i], kWords * 4));
    for (std::uint32_t v : got) CLIENT_CHECK(v == want[i], "the first launch left %u in buffer %d", v, i);
  }
  CLIENT_CHECK(host_runs == 1, "the host node ran %d times", host_runs);
  std::uint32_t word = 0;
  CU(dtoh(&word, b[10], 4));
  CLIENT_CHECK(word == 20, "the memory-operation node left %u", word);

  // In the executable graph: the memcpy node copies b1 into b7, the generic memset sets b8, the CUDA 11
  // kernel node fills b9, and the memory-operation node writes 21 to b11; each new buffer joins the
  // union (the old ones stay in it).
  const CUDA_MEMCPY3D copy7 = copy_of(b[7], b[1]);
  CU(exec_memcpy(exec, n[2], &copy7, ctx));
  g = {};
  g.type = CU_GRAPH_NODE_TYPE_MEMSET;
  g.memset = {b[8], 0, 18, 4, kWords, 1, ctx};
  CU(exec_node(exec, n[6], &g));
  dst[1] = b[9];
  value[1] = 19;
  CU(exec_kernel_v1(exec, n[1], &k1));
  op.writeValue.address = b[11];
  op.writeValue.value = 21;
  CU(exec_mem_op(exec, n[9], &m));
  const long long before_second = host_pointers();
  CU(graph_launch(exec, nullptr));
  CU(sync());
  const long long second = host_pointers() - before_second;
  const std::uint32_t want_after[3] = {11, 18, 19};
  for (int i = 0; i < 3; ++i) {
    CU(dtoh(got.data(), b[7 + i], kWords * 4));
    for (std::uint32_t v : got) CLIENT_CHECK(v == want_after[i], "the second launch left %u in buffer %d", v, 7 + i);
  }
  CU(dtoh(&word, b[11], 4));
  CLIENT_CHECK(word == 21, "the changed memory-operation node left %u", word);
  CU(exec_destroy(exec));
  CU(graph_destroy(graph));

  // The stream memory operations on host memory: a write of b0's first word; a batch that writes b1's
  // first eight bytes and then waits for b0's word (written: it returns at once); a wait for b1's.
  const long long shown_before = uvmpool_figure(libcuda, "transfers_read");
  const long long in_place_before = uvmpool_figure(libcuda, "transfers_in_place");
  CU(write_value(nullptr, b[0], 30, 0));
  CUstreamBatchMemOpParams batch[2] = {};
  batch[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  batch[0].writeValue.address = b[1];
  batch[0].writeValue.value64 = 0x3100000031ull;
  batch[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  batch[1].waitValue.address = b[0];
  batch[1].waitValue.value = 30;
  batch[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  CU(batch_mem_op(nullptr, 2, batch, 0));
  CU(wait_value64(nullptr, b[1], 0x3100000031ull, CU_STREAM_WAIT_VALUE_EQ));
  CU(sync());
  const long long mem_ops_shown = uvmpool_figure(libcuda, "transfers_read") - shown_before;
  const long long mem_ops_in_place = uvmpool_figure(libcuda, "transfers_in_place") - in_place_before;
  std::uint32_t words[2] = {};
  CU(dtoh(&word, b[0], 4));
  CU(dtoh(words, b[1], 8));
  CLIENT_CHECK(word == 30 && words[0] == 0x31 && words[1] == 0x31, "the memory operations left %u, %u %u", word,
               words[0], words[1]);
  // A null array with a count crashes the real driver (580.159.04); uvmpool's hook refuses it. Asked
  // only where the batch above went through the hook (with UVMPOOL_TIERING=off the driver's own
  // function is handed out, as without uvmpool).
  if (uvmpool_calls(libcuda, "cuStreamBatchMemOp") > 0) {
    const CUresult r = batch_mem_op(nullptr, 1, nullptr, 0);
    CLIENT_CHECK(r == CUDA_ERROR_INVALID_VALUE, "a batch of a null array answered %d", static_cast<int>(r));
  }

  // By base name: each counts both versions of its call.
  const char* node_calls[] = {"cuGraphAddKernelNode",           "cuGraphAddMemcpyNode",
                              "cuGraphAddMemsetNode",           "cuGraphAddNode_v2",
                              "cuGraphExecMemcpyNodeSetParams", "cuGraphExecNodeSetParams",
                              "cuGraphExecKernelNodeSetParams", "cuGraphAddBatchMemOpNode",
                              "cuGraphExecBatchMemOpNodeSetParams"};
  unsigned long long calls = 0;
  for (const char* name : node_calls) calls += uvmpool_calls(libcuda, name);
  std::printf("graph nodes client: ok; node hook calls %llu; graph_launches_read %lld; graph_launches_unread %lld; "
              "host pointers %lld then %lld; memory operations shown %lld in place %lld\n",
              calls, uvmpool_figure(libcuda, "graph_launches_read"), uvmpool_figure(libcuda, "graph_launches_unread"),
              first, second, mem_ops_shown, mem_ops_in_place);
  return 0;
}
