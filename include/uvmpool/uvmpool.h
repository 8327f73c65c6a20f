/* uvmpool's public C API. Programs need not link uvmpool: look the functions up at run time, e.g.
 *   typedef const char* (*version_fn)(void);
 *   version_fn v = (version_fn)dlsym(RTLD_DEFAULT, "uvmpool_version");
 *   if (v) printf("uvmpool %s\n", v());
 * (docs/observability.md has a C and a Python example.) Structs begin with struct_size, which the
 * caller sets: a program built against an older, smaller struct keeps working with a newer uvmpool.
 */
#ifndef UVMPOOL_UVMPOOL_H
#define UVMPOOL_UVMPOOL_H

#ifdef __cplusplus
extern "C" {
#endif

#define UVMPOOL_API __attribute__((visibility("default")))

/* The library's version, "MAJOR.MINOR.PATCH". */
UVMPOOL_API const char* uvmpool_version(void);

/* What uvmpool has intercepted so far in this process. */
typedef struct uvmpool_stats {
  unsigned long long struct_size;          /* set by the caller to sizeof(uvmpool_stats) */
  unsigned long long allocations;          /* device allocations that reached uvmpool */
  unsigned long long frees;                /* frees that reached uvmpool */
  unsigned long long bytes_allocated;      /* sum of the sizes of those allocations */
  unsigned long long resolved_via_dlsym;   /* hooks handed out by the dlsym override */
  unsigned long long resolved_via_getproc; /* hooks handed out by cuGetProcAddress */
  unsigned long long calls_via_export;     /* calls to uvmpool's exported cu* symbols */
  /* Since 0.2: the pool, summed over devices. */
  unsigned long long pool_allocations;     /* allocations the pool served */
  unsigned long long driver_allocations;   /* allocations handed to the driver (explicit memory pools,
                                              graph capture, devices without VMM, UVMPOOL_POOL=0) */
  unsigned long long pool_held_bytes;      /* device memory the pool holds now (chunks) */
  unsigned long long pool_live_bytes;      /* bytes of live pool allocations, as asked for */
  unsigned long long pool_peak_held_bytes; /* most held at once (per device, summed) */
  unsigned long long pool_peak_live_bytes; /* most live at once (per device, summed) */
  /* Since 0.3: spill to pinned host memory (summed over devices). */
  unsigned long long pool_live_host_bytes;      /* of pool_live_bytes, the bytes that lie in host memory */
  unsigned long long pool_host_held_bytes;      /* pinned host memory the pool holds (mapped or reserve) */
  unsigned long long pool_peak_host_held_bytes; /* most held at once (per device, summed) */
  unsigned long long pool_spilled_allocations;  /* allocations placed wholly or partly in host memory,
                                                   and the program's own cuMemCreate made there */
  unsigned long long pool_out_of_memory;        /* allocations refused: device and host exhausted */
} uvmpool_stats;

/* Fills *out (up to out->struct_size bytes). Returns 0, or -1 if out is NULL or too small. */
UVMPOOL_API int uvmpool_get_stats(uvmpool_stats* out);

/* Since 0.4: one device's figures, per tier. */
typedef struct uvmpool_device_stats {
  unsigned long long struct_size;          /* set by the caller to sizeof(uvmpool_device_stats) */
  long long device;                        /* the ordinal asked for */
  /* Device memory. */
  unsigned long long live_bytes;           /* bytes of live pool allocations that lie in device memory */
  unsigned long long peak_live_bytes;      /* most of them at once */
  unsigned long long held_bytes;           /* device memory the pool holds (in use or idle) */
  unsigned long long peak_held_bytes;
  unsigned long long budget;               /* UVMPOOL_DEVICE_LIMIT in bytes */
  /* Pinned host memory (spill). */
  unsigned long long host_live_bytes;      /* bytes of live pool allocations that lie in host memory */
  unsigned long long host_peak_live_bytes;
  unsigned long long host_held_bytes;      /* pinned host memory the pool holds (mapped or in the reserve) */
  unsigned long long host_peak_held_bytes;
  unsigned long long host_limit;           /* UVMPOOL_HOST_LIMIT in bytes (process-wide) */
  /* What the pool did on this device. */
  unsigned long long allocations;          /* served since the start */
  unsigned long long frees;
  unsigned long long live_allocations;
  unsigned long long stitched_maps;        /* new mappings built */
  unsigned long long cache_hits;           /* large allocations served by a freed mapping */
  unsigned long long spilled_allocations;  /* placed wholly or partly in host memory */
  unsigned long long out_of_memory;        /* refused: device and host exhausted */
} uvmpool_device_stats;

/* Fills *out (up to out->struct_size bytes) for `device`. Returns 0; 1 when the pool has not served
 * that device (out is then zeroed but for struct_size and device); -1 if out is NULL or too small. */
UVMPOOL_API int uvmpool_get_device_stats(int device, uvmpool_device_stats* out);

/* Every figure uvmpool keeps, as the JSON of UVMPOOL_STATS_FILE (docs/observability.md). Writes at
 * most `size` bytes into buf, NUL included (nothing when buf is NULL or size is 0), and returns the
 * length of the whole text without its NUL: call once with size 0 to learn how much to allocate. */
UVMPOOL_API unsigned long long uvmpool_stats_json(char* buf, unsigned long long size);

/* Calls that reached uvmpool's hook of one driver function: a versioned symbol ("cuMemAlloc_v2")
 * counts that variant, a base name ("cuMemAllocAsync") all of its variants. 0 if not hooked. */
UVMPOOL_API unsigned long long uvmpool_hook_calls(const char* function);

/* Since 0.5: tiering (docs/tiering.md "Advice and prefetches"). The tiers pool memory lies in. */
#define UVMPOOL_TIER_DEVICE 0 /* device memory of the device the memory was allocated on */
#define UVMPOOL_TIER_HOST 1   /* pinned host memory, read by kernels in place over PCIe */

/* Asks for [ptr, ptr + bytes) of pool memory to move to `tier`, as cuMemPrefetchAsync does: at the
 * mover's next epoch, which comes after the work queued so far on every stream. Returns 0 when a move
 * was asked for; 1 when nothing was (all of it lies there already, the mover's queue is full, or
 * UVMPOOL_TIERING is not auto); -1 when the range is not all live pool memory or tier is neither. */
UVMPOOL_API int uvmpool_prefetch(unsigned long long ptr, unsigned long long bytes, int tier);

/* Where [ptr, ptr + bytes) of pool memory should lie, as cuMemAdvise's preferred location, for the
 * allocations it lies in: UVMPOOL_TIER_DEVICE (never demoted to make room), UVMPOOL_TIER_HOST (never
 * promoted: kernels read it in place; the first to go when room is needed), or -1 (no preference: the
 * policy decides again). Returns 0 when kept; 1 when UVMPOOL_TIERING is off (nothing reads it); -1 as
 * uvmpool_prefetch. */
UVMPOOL_API int uvmpool_advise(unsigned long long ptr, unsigned long long bytes, int prefer);

#ifdef __cplusplus
}
#endif

#endif /* UVMPOOL_UVMPOOL_H */
