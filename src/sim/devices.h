// Driver initialisation and the simulated devices.
#pragma once

namespace uvmpool::sim {

// True once cuInit(0) has succeeded; nearly every call refuses to run before.
bool initialized();
// In a child forked after cuInit: the driver refuses it, as NVIDIA's does (CUDA does not survive fork;
// the child's calls answer CUDA_ERROR_NOT_INITIALIZED). The simulator's locks may also have
// been held by a thread the child does not have.
bool forked_after_init();

// Number of simulated devices (UVMPOOL_SIM_DEVICES).
int device_count();

// Whether `ordinal` names a simulated device.
bool valid_device(int ordinal);

// The driver version cuDriverGetVersion reports: CUDA 13.0, the toolkit the sim is built against.
inline constexpr int kDriverVersion = 13000;

}  // namespace uvmpool::sim
