/*
 * elastic/runtime/wait_loop.c - the query/abort loop of eep_runtime_stream_wait() (elastic/runtime/wait_loop.h).
 *
 * Key design choice: an abort does not end the wait.  The work is still queued on the stream
 * and may still touch the caller's buffers, so the loop goes on querying until it has finished
 * (aborted kernels leave their bounded waits quickly); the caller gets the work's own status.
 */
#include "elastic/runtime/wait_loop.h"

#include <unistd.h>

eep_status_t eep_wait_loop_run(const eep_wait_loop_t *w)
{
    eep_status_t status;
    int          aborted = 0;

    while ((status = w->query(w->ctx)) == EEP_INPROGRESS) {
        if (!aborted && w->should_abort != NULL && w->should_abort(w->watch_ctx)) {
            w->abort(w->ctx);
            aborted = 1;
        }
        if (w->poll_us != 0) {
            usleep(w->poll_us);
        }
    }
    return status;
}
