/* What the C test programs share: a status check that prints the library's last error and
 * fails the program, and reading the plan whose path an environment variable names. */
#ifndef SYMSCHED_TEST_UTIL_H
#define SYMSCHED_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include "symsched.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    SymschedStatus st_ = (call);                                                      \
    if (st_ != SYMSCHED_STATUS_OK) {                                                  \
      printf("FAIL %s -> %d: %s\n", #call, (int)st_, symsched_last_error());          \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

/* The plan JSON at the path in environment variable `var`, NUL-terminated in a static buffer;
 * NULL (after printing FAIL) when it cannot be read. */
static const char *read_plan(const char *var) {
  static char plan[1 << 20];
  const char *path = getenv(var);
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) {
    printf("FAIL plan file\n");
    return NULL;
  }
  size_t len = fread(plan, 1, sizeof plan - 1, f);
  fclose(f);
  plan[len] = 0;
  return plan;
}

#endif
