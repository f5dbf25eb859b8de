/*
 * elastic/runtime/wait_loop.h - wait for queued GPU work while watching for reasons to give it up.
 *
 * The loop behind eep_runtime_stream_wait(), apart from the driver so that a test can drive it
 * with fakes: query until the work is no longer EEP_INPROGRESS; between queries ask the caller
 * whether the wait has become pointless, and if so raise the abort once (the kernels leave
 * their waits within microseconds) and go on querying until the work has finished.
 */
#ifndef EEP_ELASTIC_WAIT_LOOP_H
#define EEP_ELASTIC_WAIT_LOOP_H

#include "eep/status.h"

typedef struct {
    eep_status_t (*query)(void *ctx);     /* EEP_INPROGRESS while the work runs */
    void (*abort)(void *ctx);             /* called at most once */
    void *ctx;                            /* of query and abort */
    int (*should_abort)(void *watch_ctx); /* nonzero: the wait is pointless; or NULL */
    void    *watch_ctx;
    unsigned poll_us; /* sleep between queries (0: none) */
} eep_wait_loop_t;

/** @return the first status of query() other than EEP_INPROGRESS. */
eep_status_t eep_wait_loop_run(const eep_wait_loop_t *w);

#endif /* EEP_ELASTIC_WAIT_LOOP_H */
