// Control API of the simulated driver (libcuda.so.1 built from src/sim): failure injection and call
// counts, for tests of code that sits on top of the driver. Not part of the real driver; a program
// that uses it must run against the simulated driver.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Makes the `nth_call_from_now`-th call (1 = the next one) of a driver function return `cuda_error`
// (a CUresult) without doing anything. `function_symbol_or_base` is an exported symbol
// ("cuMemAlloc_v2", "cuMemcpyAsync_ptsz") or a base name ("cuMemAlloc"); a base name counts the calls
// of all its variants together (a name that is both, like "cuMemcpy", is taken as the base). Several
// armed failures count down independently. Returns 0, or -1 if the function is unknown or
// nth_call_from_now is 0.
int uvmpool_sim_fail(const char* function_symbol_or_base, unsigned nth_call_from_now, int cuda_error);

// Calls of a function since load or the last uvmpool_sim_reset_counts(), failed ones included. A base
// name sums all its variants (so "cuMemcpy" counts cuMemcpy and cuMemcpy_ptds); any other exported
// symbol counts only itself. Unknown names count 0.
unsigned long long uvmpool_sim_call_count(const char* function);

// Sets every call count to 0 (armed failures keep counting down).
void uvmpool_sim_reset_counts(void);

// Disarms every pending failure, those from UVMPOOL_SIM_FAIL included.
void uvmpool_sim_clear_failures(void);

#ifdef __cplusplus
}
#endif
