// The device side of the virtual clock: streams, events, each device's copy engines and PCIe link, and
// the work submitted to them (kernels, copies, memsets, host functions, value waits and writes, event
// records and waits).
//
// A piece of work executes (its effect on memory happens) when it reaches the front of its stream and
// nothing it waits for is missing: at submission, almost always. What can be missing is a value that
// nobody has written yet (cuStreamWaitValue32/64), an event recorded behind such a wait, or a host
// function still running; such work stays queued, in stream order, until a later driver call from any
// thread finds it runnable (pump()). Independently of when it executes, each piece gets a virtual
// interval: it starts when its stream, its dependencies and its resources are free, and lasts what the
// cost model says of the bytes it really touched, per tier. Synchronizing calls move the calling
// thread's host clock (clock.h) to the end of what they waited for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driver/driver_api.h"
#include "sim/contexts.h"

namespace uvmpool::sim {

// What a piece of work touched while it executed: bytes per tier and path, and the address ranges.
struct Touches {
  std::uint64_t device_read = 0, device_write = 0;  // kernels and memsets: HBM
  std::uint64_t host_read = 0, host_write = 0;      // kernels and memsets: pinned host memory in place
  // Copies, by path: pinned (or host-located VMM) host memory and device memory over the copy engine,
  // pageable host memory, device to device, host to host.
  std::uint64_t to_device_pinned = 0, to_device_pageable = 0;
  std::uint64_t to_host_pinned = 0, to_host_pageable = 0;
  std::uint64_t device_to_device = 0, host_to_host = 0;
  // [first, last) address ranges of device-visible memory touched, merged where they meet.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  bool wrote = false;

  void add_range(std::uintptr_t first, std::uintptr_t last);
};

enum class WorkKind { Kernel, Memset, Copy, HostFunc, WaitValue, WriteValue };

// One piece of work as submitted. `effect` runs with the address space locked (shared): it does what
// the work does to memory, fills `touches`, and answers CUDA_SUCCESS, or CUDA_ERROR_ILLEGAL_ADDRESS
// when it met memory its device cannot reach (the context then fails, sticky).
struct WorkSpec {
  WorkKind kind = WorkKind::Kernel;
  std::string what;  // for the race detector's reports: "kernel uvmpool_fill_u32", "cuMemcpyAsync"
  std::function<CUresult(int device, Touches& touches)> effect;   // Kernel, Memset, Copy, WriteValue
  // WaitValue: whether the value is there; reads `address` (the caller holds the address space's lock).
  std::function<bool()> satisfied;
  std::function<std::uint64_t()> current;  // WaitValue: the value at `address` now
  std::uintptr_t address = 0;              // WaitValue, WriteValue: the value's address
  std::uint64_t value = 0;                 // WriteValue: the value written
  CUhostFn host_fn = nullptr;              // HostFunc
  void* host_data = nullptr;
};

namespace timeline {

// Submits work on `stream` (a created stream, 0, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD; 0 means the
// per-thread stream when `per_thread`, as for the _ptsz and _ptds variants). CUDA_ERROR_INVALID_HANDLE
// for an unknown stream, the context's errors for a default stream without a current context.
CUresult submit(CUstream stream, bool per_thread, WorkSpec work);
// Submits every piece of `work` on `stream` as one: nothing else of that stream comes between (a graph
// launch). Into a capture when the stream captures, as submit().
CUresult submit_all(CUstream stream, bool per_thread, std::vector<WorkSpec> work);
// Stream capture (graphs.cpp builds the graphs). While a stream captures, the work, event records and
// event waits given to it are recorded rather than run; a wait on an event recorded in a capture joins
// the waiting stream to it. What the real driver refuses during a capture is refused here too:
// synchronous copies, synchronizing or querying a capturing stream (UNSUPPORTED, spoiling the capture),
// a capturing stream waiting for work outside its capture (ISOLATION), and the legacy stream while a
// blocking stream of its context captures (IMPLICIT). Not modeled: a joined stream that never rejoins
// the origin (the driver's UNJOINED); every stream of a capture leaves it when it ends.
CUresult begin_capture(CUstream stream, bool per_thread, CUstreamCaptureMode mode);
// Capture modes (measured on an H200, driver 580): a thread may not make a potentially unsafe call
// (cuEventQuery, cuEventSynchronize, cuStreamQuery and cuStreamSynchronize of any stream,
// cuCtxSynchronize, cuMemAlloc, cuMemFree, pinned host allocations, cuMemAdvise) while it captures in
// global or thread-local mode itself, or while another thread captures in global mode and its own
// interaction mode (cuThreadExchangeStreamCaptureMode) is global, the default. Such a call answers
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and spoils the captures that forbid it. Virtual memory calls
// and cuEventCreate are not unsafe. CUDA_SUCCESS: the call may go on. (cuCtxSynchronize is refused
// in every mode while a stream of the context captures: synchronize_context.)
CUresult unsafe_call();
// cuMemPrefetchAsync's first check: on a capturing stream (any mode) it answers
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and spoils the capture, whatever the memory (H200).
CUresult not_capturing(CUstream stream, bool per_thread);
CUresult exchange_capture_mode(CUstreamCaptureMode* mode);
// The capture's work in the order given, and its id. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the
// capture was spoiled (it ends anyway), ILLEGAL_STATE when `stream` does not capture, UNMATCHED when
// it joined a capture another stream began.
CUresult end_capture(CUstream stream, bool per_thread, std::vector<WorkSpec>* work, std::uint64_t* id);
// NONE (with id 0), ACTIVE or INVALIDATED, and the capture's id.
CUresult capture_info(CUstream stream, bool per_thread, CUstreamCaptureStatus* status, std::uint64_t* id);
// Submits on `stream` and waits until the work ends: the synchronous copies and memsets (on the
// default stream), and the asynchronous copies from or to pageable memory, which the real driver makes
// synchronous. With `keeps_others_out` (copies) the wait models the driver's lock, as measured on an
// H100 with driver 580 (tests/gpu/hold_blocking.cu): while the calling thread waits for work queued
// behind an unwritten value, every other thread's calls but the synchronizing, querying and context
// ones wait at the door (wait_at_the_door) until it returns.
CUresult submit_and_wait(CUstream stream, bool per_thread, WorkSpec work, bool keeps_others_out);
// A kernel's first launch under lazy loading (launch.cpp), on `stream`: waits for every other stream of
// its context to have run what it has queued, keeping other threads' calls out while something cannot
// run yet. (On a GPU a first launch on a stream held behind a value returned at once, but later work
// of other streams waited behind it; that is not modeled.)
CUresult wait_for_other_streams(CUstream stream, bool per_thread);
// The same for a load made by a call on the function itself (its attributes, its occupancy, cuFuncLoad):
// waits for every stream of `context`.
CUresult wait_for_context_streams(const Context* context);
// Before a call that the driver's lock keeps out (exports.cpp): waits while another thread waits inside
// a copy (submit_and_wait). CUDA_ERROR_LAUNCH_TIMEOUT, and an error logged, after the hang timeout:
// on a GPU the call would wait until something wrote the value.
CUresult wait_at_the_door();

// Runs queued work whose waits are now satisfied. Cheap when nothing is queued; every driver call
// makes it (exports.cpp), since a host thread's plain store is how a waited-for value is usually set.
void pump();

// The latest end of work executed so far on `device` (cuMemFree waits for it, as the real driver does).
std::uint64_t device_busy_until(int device);

// When the copy engines of `device` are next all free: the end of the latest copy given to them.
std::uint64_t copies_busy_until(int device);

// The context work on `stream` runs in (see submit()).
CUresult stream_context(CUstream stream, bool per_thread, Context** out);

// Streams and events, as the entry points of streams_events.cpp expose them.
CUresult create_stream(CUstream* out, unsigned flags, int priority);
CUresult destroy_stream(CUstream stream);
CUresult query_stream(CUstream stream, bool per_thread);
CUresult synchronize_stream(CUstream stream, bool per_thread);
CUresult wait_event(CUstream stream, bool per_thread, CUevent event);
CUresult capture_status(CUstream stream, bool per_thread, CUstreamCaptureStatus* out);
CUresult create_event(CUevent* out, unsigned flags);
CUresult destroy_event(CUevent event);
CUresult record_event(CUevent event, CUstream stream, bool per_thread);
CUresult query_event(CUevent event);
CUresult synchronize_event(CUevent event);
CUresult elapsed_time(float* ms, CUevent start, CUevent end);
void hold_stream(CUstream stream, bool held);
void set_capture_status(CUstream stream, CUstreamCaptureStatus status);

// The control API's figures (sim_control.h).
unsigned long long link_bytes(int device, int direction);
unsigned long long work_count();
void reset_clock();

// cuCtxSynchronize's wait for `context`'s streams; cuCtxDestroy and primary-context release call
// release_context when a context stops being active (its streams and events go, their work finishes).
CUresult synchronize_context(const Context* context);
void release_context(const Context* context);

}  // namespace timeline
}  // namespace uvmpool::sim
