/* A hello-world that the test suite builds with -fsanitize=address or =thread and runs with
 * libuvmpool.so preloaded: the sanitizer runtime resolves its interceptors with dlsym(RTLD_NEXT, ...)
 * before uvmpool's constructor has run (issue 17, item 5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char* p = malloc(32);
  if (p == NULL) return 1;
  strcpy(p, "sanitized hello: ok");
  puts(p);
  free(p);
  return 0;
}
