/* What the P/D example programs (pd_prefill.c, pd_decode.c) and the UCX
 * benchmark share: a SPEC §6 transfer scenario (bench/scenario.h builds
 * it; the programs only give it real memory), engine pools backed by
 * mmap'd memory, the logical value of every (layer, component, token,
 * head, byte) written into a pool at its block position and checked there
 * (tests/support's oracle_element_hash, as tests/lib/plan/test_transfer.c
 * defines the values), and the reshardd calls both programs make. */
#ifndef RESHARD_PD_COMMON_H
#define RESHARD_PD_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard_client.h"
#include "reshard_ucx.h"
#include "reshard_ucx_peers.h"
#include "scenario.h"

/* The options both programs take: --target HOST:PORT (reshardd),
 * --scenario NAME, --peers FILE (the prefill's peers file), --tokens N (0:
 * the scenario's) and --seed N. */
typedef struct pd_options {
  const char *target, *scenario, *peers;
  uint64_t tokens, seed;
} pd_options;

/* pd_options' defaults: scenario T1, seed 42. */
#define PD_OPTIONS_INIT                                                        \
  { .scenario = "T1", .seed = 42 }

/* When argv[*i] is one of pd_options' and has a value, stores the value,
 * advances *i past it and returns true; otherwise returns false. */
bool pd_parse_option(int argc, char **argv, int *i, pd_options *o);

/* The transfer scenario named by a prefix of its name ("T1", "T3"), with
 * `tokens` tokens (0: the spec's), source blocks scattered by `seed`.
 * Built in `arena`. Returns 0, or -1 with the reason in `msg`. */
int pd_build(const char *name, uint64_t tokens, uint64_t seed,
             reshard_arena *arena, const transfer_spec **spec,
             transfer_scenario *out, char *msg, size_t msg_size);

/* The pool of target participant `index` of `t` (canonical order) as the
 * decode engine lays it out, its block table scattered by `seed`. */
int pd_target_pool(const transfer_spec *spec, const transfer_scenario *t,
                   size_t index, uint64_t seed, reshard_arena *arena,
                   scenario_pool *out, char *msg, size_t msg_size);

/* Real memory for a pool: one anonymous mapping per region (untouched,
 * so only the bytes a process writes or reads cost memory), the pool's
 * region addresses set to it. The pool keeps pointing at the memory until
 * pd_memory_free. */
typedef struct pd_memory {
  uint8_t **bytes;
  uint64_t *nbytes;
  size_t count;
} pd_memory;

int pd_memory_map(reshard_pool *pool, pd_memory *out, char *msg,
                  size_t msg_size);
void pd_memory_free(pd_memory *memory);
void pd_memory_zero(pd_memory *memory);
/* Every byte of every region never zero and not a logical value's
 * pattern: a plan that reads a byte it should not writes noise. */
void pd_memory_noise(pd_memory *memory, uint64_t seed);

/* The pool's regions for reshard_ucx_memory_register (pointing into
 * `pool`'s strings), `count` of them; malloc'd, caller frees. */
reshard_ucx_region *pd_ucx_regions(const reshard_pool *pool,
                                   const pd_memory *memory);

/* Writes the logical value of every (layer, component, token < tokens,
 * head) `part` holds at its position in `pool` under `table`. */
void pd_fill(const reshard_descriptor *desc, const reshard_placement_part *part,
             const reshard_pool *pool, const uint32_t *table, uint64_t tokens,
             uint8_t *const *bytes);

/* Checks every byte of `memory`: the logical values of tokens < tokens at
 * their positions, zero everywhere else. Returns the bytes of values
 * checked, or -1 with the first wrong byte named in `msg` (region, offset,
 * and the (layer, component, token, head, byte) that lives there). */
int64_t pd_verify(const reshard_descriptor *desc,
                  const reshard_placement_part *part, const reshard_pool *pool,
                  const uint32_t *table, uint64_t tokens,
                  const pd_memory *memory, char *msg, size_t msg_size);

const reshard_placement_part *pd_find_part(const reshard_placement *placement,
                                           const char *participant_id);

/* RegisterPlacement; checks the id is `want`. */
int pd_register_placement(reshard_client *client,
                          const reshard_placement *placement, const char *want,
                          reshard_arena *arena, char *msg, size_t msg_size);

/* RegisterMemory of `pool` against `placement_id`; the memory id into
 * `memory_id` (RESHARD_ID_SIZE bytes). */
int pd_register_pool(reshard_client *client, const reshard_pool *pool,
                     const char *placement_id, char *memory_id,
                     reshard_arena *arena, char *msg, size_t msg_size);

/* ForgetMemory; whether the daemon knew it is ignored. */
void pd_forget_pool(reshard_client *client, const char *memory_id);

/* Fills `req` with the PlanTransfer request of target pool `sp` of `t`
 * (registered as `memory_id`) from the sources the prefill's peers file
 * `file` names (by memory id and block table), `runs` set as given; the
 * caller sets operation_id. `req` points into `pooled` (the caller's),
 * `sp`, `file` and the returned memory id array (malloc'd, caller frees
 * after the request; NULL when memory runs out). */
char **pd_transfer_request(const reshard_ucx_peer_file *file,
                           const transfer_scenario *t, const scenario_pool *sp,
                           const char *memory_id, int runs,
                           Reshard__V1__PooledMemory *pooled,
                           Reshard__V1__PlanTransferRequest *req);

#endif
