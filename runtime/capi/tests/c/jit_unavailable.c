/* A launch the JIT cannot run reaches C as SYMSCHED_STATUS_UNAVAILABLE, with the JIT's message,
 * on every rank; after the group's reset the same launch runs on the interpreter. The plan
 * (allreduce_one_shot, 2 ranks) is in SYMSCHED_JIT_PLAN; the runner points XDG_CACHE_HOME at a
 * regular file, so the compiled kernel cannot be stored in the JIT's disk cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "symsched.h"
#include "test_util.h"

int main(void) {
  SymschedRuntime *rt = NULL;
  CHECK(symsched_init_from_env(&rt));
  int rank = symsched_rank(rt), n = symsched_world_size(rt);
  uint32_t ranks[8];
  for (int i = 0; i < n; i++) ranks[i] = (uint32_t)i;
  SymschedGroup *g = NULL;
  CHECK(symsched_group_create(rt, ranks, (size_t)n, false, &g));
  const char *plan = read_plan("SYMSCHED_JIT_PLAN");
  if (!plan) return 1;
  size_t x = 0;
  CHECK(symsched_malloc(rt, 16, &x));
  float *xs = (float *)symsched_peer_ptr(g, (uint32_t)rank, x, 16);
  if (!xs) { printf("FAIL peer_ptr: %s\n", symsched_last_error()); return 1; }
  char args[300];
  for (int i = 0; i < 4; i++) xs[i] = (float)(rank + 1 + i);
  snprintf(args, sizeof args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": 4}, \"backend\": \"jit\", \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  SymschedStatus st = symsched_launch_plan(g, plan, args);
  if (st != SYMSCHED_STATUS_UNAVAILABLE || !strstr(symsched_last_error(), "jit: cannot compile schedule `allreduce_one_shot`")) {
    printf("FAIL jit launch -> %d: %s\n", (int)st, symsched_last_error());
    return 1;
  }
  printf("JIT_UNAVAILABLE rank %d: %s\n", rank, symsched_last_error());
  /* The failed launch aborted the group for its peers; after the reset the interpreter runs it. */
  uint64_t gen = 0;
  CHECK(symsched_group_reset_after_abort(g, &gen));
  for (int i = 0; i < 4; i++) xs[i] = (float)(rank + 1 + i);
  snprintf(args, sizeof args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": 4}, \"backend\": \"interp\", \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  CHECK(symsched_launch_plan(g, plan, args));
  for (int i = 0; i < 4; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += (float)(r + 1 + i);
    if (xs[i] != want) { printf("FAIL interp [%d] = %f, want %f\n", i, xs[i], want); return 1; }
  }
  CHECK(symsched_barrier(g));
  symsched_group_destroy(g);
  CHECK(symsched_finalize(rt));
  printf("C_JIT_UNAVAILABLE_OK rank %d\n", rank);
  return 0;
}
