/* Two-rank smoke test of the C ABI: ring put_with_signal, wait, barrier, stats, error path, a
 * compiled plan (allreduce_one_shot, path in SYMSCHED_SMOKE_PLAN) launched twice, a launch the
 * ranks disagree on (a status on both, the buffer untouched), and an abort, its refusal and the
 * reset after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "symsched.h"
#include "test_util.h"

int main(void) {
  SymschedRuntime *rt = NULL;
  CHECK(symsched_is_available());
  CHECK(symsched_init_from_env(&rt));
  int rank = symsched_rank(rt), n = symsched_world_size(rt);
  size_t buf = 0;
  CHECK(symsched_malloc(rt, 64, &buf));
  uint32_t ranks[8];
  for (int i = 0; i < n; i++) ranks[i] = (uint32_t)i;
  SymschedGroup *g = NULL;
  CHECK(symsched_group_create(rt, ranks, (size_t)n, false, &g));
  uint32_t slot = 0;
  CHECK(symsched_signal_slots(g, "smoke", 1, &slot));
  uint64_t *mine = (uint64_t *)symsched_peer_ptr(g, (uint32_t)rank, buf, 8);
  if (!mine) { printf("FAIL peer_ptr: %s\n", symsched_last_error()); return 1; }
  *mine = 1000 + (uint64_t)rank; /* staged in our own heap, then put to the next rank */
  size_t dst = buf + 8;
  CHECK(symsched_put_with_signal(g, (uint32_t)((rank + 1) % n), dst, buf, 8, slot, SYMSCHED_SIGNAL_MODE_ADD, 1));
  CHECK(symsched_wait(g, slot, SYMSCHED_CMP_GE, 1));
  uint64_t *got = (uint64_t *)symsched_peer_ptr(g, (uint32_t)rank, dst, 8);
  if (*got != 1000 + (uint64_t)((rank + n - 1) % n)) { printf("FAIL value %llu\n", (unsigned long long)*got); return 1; }
  CHECK(symsched_barrier(g));
  SymschedStats s;
  CHECK(symsched_stats(rt, &s));
  if (s.allocated != 64) { printf("FAIL stats %llu\n", (unsigned long long)s.allocated); return 1; }
  if (symsched_put(g, 99, buf, buf, 8) != SYMSCHED_STATUS_RANK_OUT_OF_RANGE || strlen(symsched_last_error()) == 0) {
    printf("FAIL error path\n");
    return 1;
  }
  if (symsched_put(NULL, 0, buf, buf, 8) != SYMSCHED_STATUS_INVALID_ARGUMENT) { printf("FAIL null\n"); return 1; }
  if (symsched_wait(g, slot, 42, 0) != SYMSCHED_STATUS_INVALID_ARGUMENT) { printf("FAIL bad cmp\n"); return 1; }
  if (symsched_check_plan_version(9999) != SYMSCHED_STATUS_VERSION) { printf("FAIL version\n"); return 1; }
  if (symsched_launch_plan(g, "{}", "{}") != SYMSCHED_STATUS_INVALID_ARGUMENT) { printf("FAIL bad plan\n"); return 1; }
  /* A compiled allreduce on 4 floats, twice: results and back-to-back epochs. */
  const char *plan = read_plan("SYMSCHED_SMOKE_PLAN");
  if (!plan) return 1;
  size_t x = 0;
  CHECK(symsched_malloc(rt, 16, &x));
  float *xs = (float *)symsched_peer_ptr(g, (uint32_t)rank, x, 16);
  char args[256];
  snprintf(args, sizeof args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": 4}, \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  /* The same launch on the JIT backend (per call), after two on the default one. */
  char jit_args[300];
  snprintf(jit_args, sizeof jit_args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": 4}, \"backend\": \"jit\", \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  char bad_args[300];
  snprintf(bad_args, sizeof bad_args,
           "{\"dtype\": \"f32\", \"sizes\": {\"n\": 4}, \"backend\": \"llvm\", \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  if (symsched_launch_plan(g, plan, bad_args) != SYMSCHED_STATUS_INVALID_ARGUMENT || !strstr(symsched_last_error(), "llvm")) {
    printf("FAIL bad backend\n");
    return 1;
  }
  for (int iter = 0; iter < 3; iter++) {
    for (int i = 0; i < 4; i++) xs[i] = (float)(rank + 1 + i + 10 * iter);
    CHECK(symsched_launch_plan(g, plan, iter == 2 ? jit_args : args));
    for (int i = 0; i < 4; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += (float)(r + 1 + i + 10 * iter);
      if (xs[i] != want) { printf("FAIL allreduce iter %d [%d] = %f, want %f\n", iter, i, xs[i], want); return 1; }
    }
  }
  /* Rank 0 launches 4 elements, rank 1 launches 3: both get the disagreement, nothing moves. */
  int mine_n = 4 - rank;
  for (int i = 0; i < 4; i++) xs[i] = 7.0f;
  snprintf(args, sizeof args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": %d}, \"buffers\": [{\"offset\": %zu, \"bytes\": %d}]}",
           mine_n, x, 4 * mine_n);
  SymschedStatus st = symsched_launch_plan(g, plan, args);
  if (st != SYMSCHED_STATUS_DISAGREEMENT || !strstr(symsched_last_error(), "rank 0: 4 elements f32 sum") ||
      !strstr(symsched_last_error(), "rank 1: 3 elements f32 sum")) {
    printf("FAIL disagreement -> %d: %s\n", (int)st, symsched_last_error());
    return 1;
  }
  for (int i = 0; i < 4; i++) if (xs[i] != 7.0f) { printf("FAIL disagreement wrote [%d]\n", i); return 1; }
  /* Rank 0 aborts the group; every rank's next launch is refused naming it; a reset restores. */
  snprintf(args, sizeof args,
           "{\"dtype\": \"f32\", \"op\": \"sum\", \"sizes\": {\"n\": 4}, \"buffers\": [{\"offset\": %zu, \"bytes\": 16}]}", x);
  if (rank == 0) CHECK(symsched_group_abort(g, "smoke: failed inside a collective"));
  st = symsched_launch_plan(g, plan, args);
  if (st != SYMSCHED_STATUS_ABORTED || !strstr(symsched_last_error(), "smoke: failed inside a collective")) {
    printf("FAIL abort -> %d: %s\n", (int)st, symsched_last_error());
    return 1;
  }
  uint64_t gen = 0;
  CHECK(symsched_group_reset_after_abort(g, &gen));
  if (gen != 1 || symsched_group_generation(g) != 1) { printf("FAIL generation %llu\n", (unsigned long long)gen); return 1; }
  for (int i = 0; i < 4; i++) xs[i] = (float)(rank + 1);
  CHECK(symsched_launch_plan(g, plan, args));
  for (int i = 0; i < 4; i++) {
    if (xs[i] != 3.0f) { printf("FAIL allreduce after reset [%d] = %f\n", i, xs[i]); return 1; }
  }
  CHECK(symsched_barrier(g));
  symsched_group_destroy(g);
  CHECK(symsched_finalize(rt));
  printf("C_SMOKE_OK rank %d\n", rank);
  return 0;
}
