// Both ends of CUDA IPC for tests/hooks/ipc_test.py, driven over stdin/stdout, one command a line.
//   client_ipc export BYTES      allocates BYTES, fills byte i with (i * 7 + 1) & 0xff, prints
//                                "handle <128 hex digits> legacy_capable <0|1>", then serves commands:
//     check BYTE                 all BYTES read back (cuMemcpyDtoH) equal BYTE: "check ok" / "check bad ..."
//     pattern                    the original fill reads back: "pattern ok" / "pattern bad ..."
//     free                       cuMemFree: "free <CUresult>"
//     free_async held|held_elsewhere|capture
//                                cuMemFreeAsync on a new stream that the simulator holds busy (of the
//                                current context, or of a second context of the device made for it),
//                                or that reports an active graph capture: "free_async <CUresult>"
//     release                    ends the hold of that stream: "release done"
//     alloc_same                 cuMemAlloc of BYTES more: "alloc_same same|other" (the freed address?)
//     get                        cuIpcGetMemHandle once more: "get <CUresult>"
//     churn N                    allocates N more of BYTES and fills them with 0x11: "churn done"
//     live                       uvmpool's live pool bytes: "live <bytes> <in host memory>"
//     ipc                        opens of its exports served, closes dealt with: "ipc opens <n> closes <n>"
//                                (-1: no such figure)
//     again                      cuIpcGetMemHandle once more: "again same" / "again different"
//     open_own                   cuIpcOpenMemHandle of its own handle: "open_own <CUresult>"
//     retain                     NCCL's registration decision (p2p.cc ipcRegisterBuffer) on the
//                                allocation: "retain legacy_capable <0|1> retain <CUresult> path <legacy|vmm|none>"
//     create                     cuMemCreate of a device handle: "create <CUresult> location <type>"
//     fork                       forks a child that exits at once (atexit handlers run): "fork done"
//     exit                       exits normally
//   client_ipc import HEX        cuIpcOpenMemHandle: "open <CUresult>", then (if opened) serves:
//     pattern BYTES / check BYTE BYTES / write BYTE BYTES (cuMemsetD8)
//     fork_hold SECONDS          forks a child that sleeps SECONDS then _exits: "fork_hold done"
//     close                      cuIpcCloseMemHandle: "close <CUresult>" (also a second time)
//     exit
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "linked_client.h"

namespace {

std::string to_hex(const CUipcMemHandle& h) {
  std::string s;
  char b[3];
  for (unsigned char c : h.reserved) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}

bool from_hex(const std::string& s, CUipcMemHandle* h) {
  if (s.size() != 2 * sizeof h->reserved) return false;
  for (size_t i = 0; i < sizeof h->reserved; ++i) h->reserved[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

void say(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the test reads line by line
}

unsigned char fill_byte(size_t i) { return static_cast<unsigned char>((i * 7 + 1) & 0xff); }

std::string check_pattern(CUdeviceptr p, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  CU(cuMemcpyDtoH(host.data(), p, bytes));
  for (size_t i = 0; i < bytes; ++i)
    if (host[i] != fill_byte(i)) return "bad at " + std::to_string(i) + ": " + std::to_string(host[i]);
  return "ok";
}

std::string check_byte(CUdeviceptr p, size_t bytes, int value) {
  std::vector<unsigned char> host(bytes);
  CU(cuMemcpyDtoH(host.data(), p, bytes));
  for (size_t i = 0; i < bytes; ++i)
    if (host[i] != value) return "bad at " + std::to_string(i) + ": " + std::to_string(host[i]);
  return "ok";
}

// uvmpool's live pool bytes, and of them those in host memory.
std::string live_bytes() {
  uvmpool_stats s;
  if (!read_uvmpool_stats(nullptr, &s)) return "none none";
  return std::to_string(s.pool_live_bytes) + " " + std::to_string(s.pool_live_host_bytes);
}

// What NCCL's ipcRegisterBuffer decides for a buffer (transport/p2p.cc): VMM export when the memory
// is not legacy-IPC capable and the driver retains its handle; legacy IPC otherwise.
std::string nccl_decision(CUdeviceptr p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, p));
  int legacy = 0;
  CU(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base));
  // Asked always (NCCL asks only when not legacy capable), so the test sees the answer either way.
  CUmemGenericAllocationHandle h = 0;
  const CUresult retain = cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(base));
  if (retain == CUDA_SUCCESS) {
    CUmemAllocationProp prop{};
    CU(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    CU(cuMemRelease(h));
  }
  std::string path = "none";
  CUipcMemHandle ipc;
  if (!legacy && retain == CUDA_SUCCESS)
    path = "vmm";
  else if (cuIpcGetMemHandle(&ipc, base) == CUDA_SUCCESS)
    path = "legacy";
  return "legacy_capable " + std::to_string(legacy) + " retain " + std::to_string(retain) + " path " + path;
}

int exporter(size_t bytes) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, bytes));
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = fill_byte(i);
  CU(cuMemcpyHtoD(p, host.data(), bytes));
  CUipcMemHandle handle;
  CU(cuIpcGetMemHandle(&handle, p));
  int legacy = -1;
  CU(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
  say("handle " + to_hex(handle) + " legacy_capable " + std::to_string(legacy));
  std::vector<CUdeviceptr> churned;
  CUstream stream = nullptr;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "check") {
      int v = 0;
      in >> v;
      say("check " + check_byte(p, bytes, v));
    } else if (cmd == "pattern") {
      say("pattern " + check_pattern(p, bytes));
    } else if (cmd == "free") {
      say("free " + std::to_string(cuMemFree(p)));
    } else if (cmd == "free_async") {
      std::string how;
      in >> how;
      using Hold = void (*)(CUstream, int);
      auto hold = reinterpret_cast<Hold>(uvmpool_api(nullptr, "uvmpool_sim_hold_stream"));
      auto capture = reinterpret_cast<Hold>(uvmpool_api(nullptr, "uvmpool_sim_set_capture_status"));
      CLIENT_CHECK(hold != nullptr && capture != nullptr, "free_async needs the simulated driver");
      // held_elsewhere: the stream is of a second context of the device, not the current one.
      CUcontext elsewhere = nullptr;
      if (how == "held_elsewhere") {
        CUdevice device = 0;
        CU(cuCtxGetDevice(&device));
        CU(cuCtxCreate(&elsewhere, nullptr, 0, device));  // current now
      }
      CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
      CU(cuMemsetD8Async(p, 0x22, bytes, stream));  // work of the stream on the memory, before the free
      if (elsewhere != nullptr) {
        CUcontext popped = nullptr;
        CU(cuCtxPopCurrent(&popped));  // the first is current again (the second lives on with its stream)
      }
      if (how == "held" || how == "held_elsewhere") hold(stream, 1);
      if (how == "capture") capture(stream, CU_STREAM_CAPTURE_STATUS_ACTIVE);
      say("free_async " + std::to_string(cuMemFreeAsync(p, stream)));
    } else if (cmd == "release") {
      using Hold = void (*)(CUstream, int);
      reinterpret_cast<Hold>(uvmpool_api(nullptr, "uvmpool_sim_hold_stream"))(stream, 0);
      say("release done");
    } else if (cmd == "alloc_same") {
      CUdeviceptr q = 0;
      CU(cuMemAlloc(&q, bytes));
      churned.push_back(q);
      say(std::string("alloc_same ") + (q == p ? "same" : "other"));
    } else if (cmd == "get") {
      CUipcMemHandle again;
      say("get " + std::to_string(cuIpcGetMemHandle(&again, p)));
    } else if (cmd == "churn") {
      int n = 0;
      in >> n;
      for (int i = 0; i < n; ++i) {
        CUdeviceptr q = 0;
        CU(cuMemAlloc(&q, bytes));
        CU(cuMemsetD8(q, 0x11, bytes));
        churned.push_back(q);
      }
      say("churn done");
    } else if (cmd == "live") {
      say("live " + live_bytes());
    } else if (cmd == "ipc") {
      say("ipc opens " + std::to_string(uvmpool_figure(nullptr, "ipc_opens_served")) + " closes " +
          std::to_string(uvmpool_figure(nullptr, "ipc_closes_seen")));
    } else if (cmd == "again") {
      CUipcMemHandle again;
      CU(cuIpcGetMemHandle(&again, p));
      say(std::string("again ") + (std::memcmp(&again, &handle, sizeof handle) == 0 ? "same" : "different"));
    } else if (cmd == "open_own") {
      CUdeviceptr mine = 0;
      const CUresult r = cuIpcOpenMemHandle(&mine, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r == CUDA_SUCCESS) CU(cuIpcCloseMemHandle(mine));
      say("open_own " + std::to_string(r));
    } else if (cmd == "retain") {
      say("retain " + nccl_decision(p));
    } else if (cmd == "create") {
      // The program's own device cuMemCreate of one 2 MiB handle, and the location the driver's
      // answer for it names (1: device).
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
      CUmemGenericAllocationHandle h = 0;
      const CUresult r = cuMemCreate(&h, 2u << 20, &prop, 0);
      CUmemAllocationProp got{};
      if (r == CUDA_SUCCESS) CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
      say("create " + std::to_string(r) + " location " + std::to_string(got.location.type));
    } else if (cmd == "fork") {
      const pid_t child = fork();
      if (child == 0) std::exit(0);  // runs the atexit handlers, as a worker process ending would
      int status = 0;
      waitpid(child, &status, 0);
      say("fork done");
    } else if (cmd == "exit") {
      return 0;
    }
  }
  return 0;
}

int importer(const std::string& hex) {
  CUipcMemHandle handle;
  CLIENT_CHECK(from_hex(hex, &handle), "bad handle text");
  CUdeviceptr p = 0;
  const CUresult r = cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  say("open " + std::to_string(r));
  if (r != CUDA_SUCCESS) return 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    size_t bytes = 0;
    int v = 0;
    if (cmd == "pattern") {
      in >> bytes;
      say("pattern " + check_pattern(p, bytes));
    } else if (cmd == "check") {
      in >> v >> bytes;
      say("check " + check_byte(p, bytes, v));
    } else if (cmd == "write") {
      in >> v >> bytes;
      CU(cuMemsetD8(p, static_cast<unsigned char>(v), bytes));
      CU(cuCtxSynchronize());
      say("write done");
    } else if (cmd == "fork_hold") {
      in >> v;
      if (fork() == 0) {
        sleep(static_cast<unsigned>(v));
        _exit(0);
      }
      say("fork_hold done");
    } else if (cmd == "close") {
      say("close " + std::to_string(cuIpcCloseMemHandle(p)));
    } else if (cmd == "exit") {
      return 0;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLIENT_CHECK(argc >= 3, "usage: client_ipc export BYTES | import HEX");
  use_primary_context();
  const std::string mode = argv[1];
  if (mode == "export") return exporter(std::stoull(argv[2]));
  if (mode == "import") return importer(argv[2]);
  CLIENT_CHECK(false, "unknown mode %s", argv[1]);
  return 1;
}
