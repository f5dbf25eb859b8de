/* tests/gin/gin_harness.h - a small multi-process harness for the GIN plugin's CPU tests: the
 * plugin is dlopen'ed as NCCL would, each case runs as N forked rank processes that meet on a
 * shared board (handles, bounded barriers), and the parent reaps them under a deadline, killing
 * what is left.  Results print in cmocka's words ("[  PASSED  ] N test(s).") so tests/run.sh
 * counts every case. */
#ifndef EEP_TESTS_GIN_HARNESS_H
#define EEP_TESTS_GIN_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "gin/nccl_plugin_abi.h"

#define GT_MAX_RANKS 8
#define GT_SLOTS     8

typedef struct {
    int      arrive[GT_SLOTS];
    int      gen[GT_SLOTS];
    char     handle[GT_SLOTS][GT_MAX_RANKS][EEP_NCCL_NET_HANDLE_MAXSIZE];
    uint64_t word[GT_SLOTS][GT_MAX_RANKS];
} gt_board_t;

typedef struct {
    int                       rank, nranks;
    gt_board_t               *board;
    const eep_nccl_net_v11_t *net;
    const eep_nccl_gin_v11_t *gin;
    void                     *progress_coll; /* progressed while waiting in barriers */
} gt_t;

typedef int (*gt_case_fn_t)(gt_t *t);

typedef struct {
    const char  *name;
    int          nranks;
    gt_case_fn_t fn;
    unsigned     killed_mask; /* ranks expected to die of SIGKILL */
    int          timeout_s;
} gt_case_t;

/* Runs the cases, prints per case and the cmocka-style totals; returns the exit status. */
int gt_main(const gt_case_t *cases, int ncases);

/* Bounded barrier among `count` ranks on board slot `slot`; 0, or -1 after timeout_ms. */
int gt_barrier(gt_t *t, int slot, int count, int timeout_ms);
/* Publishes this rank's handle in slot, waits for all ranks (barrier), and reads them. */
int gt_exchange(gt_t *t, int slot, const void *mine, void *all[GT_MAX_RANKS]);

/* A GIN comm among all ranks (init with ctx, listen, exchange, connect, closeListen). */
int gt_gin_comm(gt_t *t, int slot, void **ctx_p, void **coll_p);
/* Waits for requests in order (testing each, progressing the comm); 0, -1 error, -2 timeout. */
int gt_gin_wait(gt_t *t, void *coll, void **reqs, int n, int timeout_ms);
/* Progresses coll until *word == expect; 0, or -1 on timeout or when it passes expect. */
int gt_gin_wait_word(gt_t *t, void *coll, const uint64_t *word, uint64_t expect, int timeout_ms);

/* A symbol of the loaded plugin beyond its two tables (eep_gin_peers_lost), or NULL. */
void *gt_plugin_sym(const char *name);

int64_t gt_now_ms(void);
/* xorshift64: the tests' reproducible randomness. */
uint64_t gt_rand(uint64_t *state);

#define GT_CHECK(_cond, ...)                                                                       \
    do {                                                                                           \
        if (!(_cond)) {                                                                            \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", t->rank, __FILE__, __LINE__,     \
                    #_cond);                                                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#endif
