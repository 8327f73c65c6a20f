// Where the simulated clock's host time goes (UVMPOOL_SIM_PROFILE): at exit, each entry point's calls
// and the modeled host time the calling threads spent inside them, their waits for the device included
// (fault_injection.h keeps the tallies; uvmpool_sim_call_ns reads them during a run). A modeled figure
// says a run took so long; this says which driver calls made it so (a cuMemSetAccess per mapping, a
// synchronize behind a hold), without a GPU.
#pragma once

namespace uvmpool::sim::profile {

// Arms the report at exit when UVMPOOL_SIM_PROFILE names a destination (once; later calls do nothing).
void arm();

}  // namespace uvmpool::sim::profile
