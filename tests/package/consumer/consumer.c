/* Uses uvmpool's C API either linked (uvmpool::uvmpool, pkg-config's -luvmpool) or looked up with
 * dlsym (uvmpool::headers; LOOK_UP defined), and checks the version it finds against the one the
 * package said it was. */
#include <stdio.h>
#include <string.h>

#include <uvmpool/uvmpool.h>

#ifdef LOOK_UP
#include <dlfcn.h>
#endif

int main(void) {
#ifdef LOOK_UP
  const char* (*version)(void) = (const char* (*)(void))dlsym(RTLD_DEFAULT, "uvmpool_version");
  int (*get_stats)(uvmpool_stats*) = (int (*)(uvmpool_stats*))dlsym(RTLD_DEFAULT, "uvmpool_get_stats");
  if (!version || !get_stats) {
    puts("consumer: uvmpool not loaded");
    return 0;
  }
#else
  const char* (*version)(void) = uvmpool_version;
  int (*get_stats)(uvmpool_stats*) = uvmpool_get_stats;
#endif
  uvmpool_stats s = {.struct_size = sizeof s};
  if (get_stats(&s) != 0) {
    puts("consumer: uvmpool_get_stats failed");
    return 1;
  }
  if (strcmp(version(), WANT_VERSION) != 0) {
    printf("consumer: uvmpool %s, the package said %s\n", version(), WANT_VERSION);
    return 1;
  }
  printf("consumer: uvmpool %s, %llu allocations\n", version(), s.allocations);
  return 0;
}
