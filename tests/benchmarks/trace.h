// A deterministic allocation trace shaped like mixed-precision training of a GPT-style decoder
// with a sequence length that changes every step (the model is described in trace.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace uvmpool::bench {

struct TraceEvent {
  bool alloc;         // false: free
  std::uint32_t id;   // allocation number, from 0
  std::uint64_t bytes;  // for allocations
};

struct ModelShape {
  int layers = 8;
  int hidden = 1024;
  int heads = 16;
  int vocab = 32000;
  int batch = 8;
  int seq_min = 64;   // each step draws its sequence length from [seq_min, seq_max], a multiple of 8
  int seq_max = 512;
  int steps = 30;
  std::uint64_t seed = 1;
};

struct Trace {
  std::vector<TraceEvent> events;
  std::uint32_t allocations = 0;
  std::uint64_t peak_live = 0;  // most bytes live at once (sizes as asked for)
  std::uint64_t allocated = 0;  // bytes allocated over the whole trace
};

Trace transformer_trace(const ModelShape& shape);

}  // namespace uvmpool::bench
