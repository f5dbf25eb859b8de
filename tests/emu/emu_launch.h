/*
 * emu_launch.h - the launch harness of the emulated kernel tests (tests/emu/ep_kernel_case.h for
 * test_ep_kernels_emu.cc, and test_ep_training_emu.cc): one kernel body launched on every live
 * rank with every block a process (fork), its threads the shim's fibers (launch_once; with
 * EEP_EMU_LSA a network process per rank beside them, tests/emu/gin_model.h), a hang past LIMIT_S
 * killed; the shared mapping's bump allocator (shm_alloc) and the element checks (check).
 * The includer defines W (the ranks) and LIMIT_S (s, for the whole grid of one launch) first,
 * and includes tests/emu/ep_kernel_shim.h and, in the hybrid builds (EEP_EMU_LSA),
 * tests/emu/gin_model.h before it; it maps g_mem (g_size bytes, MAP_SHARED, before any launch)
 * and, with EEP_EMU_LSA, lays out g_net in it.  Test code only, for the one translation unit that
 * includes it.
 */
#ifndef EEP_TESTS_EMU_EMU_LAUNCH_H
#define EEP_TESTS_EMU_EMU_LAUNCH_H

#include "tests/emu/ep_kernel_shim.h"

#include "kernels/ep/ep_params.h" /* eep_epk_params_t, EEP_EPK_THREADS */

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#if !defined(W) || !defined(LIMIT_S)
#error "define W and LIMIT_S before including tests/emu/emu_launch.h"
#endif
#if defined(EEP_EMU_LSA) && !defined(EEP_TESTS_EMU_GIN_MODEL_H)
#error "a hybrid build includes tests/emu/gin_model.h before tests/emu/emu_launch.h"
#endif

#ifdef EEP_EMU_LSA
static eep_gin_model *g_net; /* the network of the launches (in the shared mapping) */
#endif

static unsigned char *g_mem;
static size_t         g_used, g_size, g_high; /* g_high: the most any case used */
static int            g_errors, g_checks;
/* Degraded mode (issue 24): the ranks of the case that are dead: their block processes never
   run, the others' kernels get the mask (p.dead_mask) and are checked against the reference of
   the degraded inputs (eep_ref_degrade). */
static unsigned g_dead;
static bool     is_dead(int r)
{
    return ((g_dead >> r) & 1u) != 0;
}

/* A bump allocation in the shared mapping (zeroed). */
static void *shm_alloc(size_t bytes)
{
    void *p;

    g_used = (g_used + 255) / 256 * 256;
    if (g_used + bytes > g_size) {
        fprintf(stderr, "emulation: shared mapping too small\n");
        exit(1);
    }
    p = g_mem + g_used;
    g_used += bytes;
    g_high = g_used > g_high ? g_used : g_high;
    return p;
}

#define U(p) ((unsigned long long)(uintptr_t)(p))

typedef void (*body_fn)(const eep_epk_params_t &);

struct block_arg {
    body_fn                 fn;
    const eep_epk_params_t *p;
};

static void block_thread(void *a)
{
    const block_arg *ba = (const block_arg *)a;

    ba->fn(*ba->p);
}

/* One block, in this (child) process: its threads are the shim's fibers. */
static void run_block(body_fn fn, const eep_epk_params_t &p, unsigned b, unsigned G, size_t dyn)
{
    block_arg arg = { fn, &p };

    blockIdx.x   = b;
    gridDim.x    = G;
    blockDim.x   = EEP_EPK_THREADS;
    eep_shim_dyn = (int *)calloc(dyn / 4 + 1, 4);
    eep_shim_run_fibers(EEP_EPK_THREADS, block_thread, &arg);
}

/* A launch of @p G blocks of @p fn on ranks 0 to @p nranks - 1 but the dead (@p p: one params a
   rank), every block of every rank a process, @p dyn bytes of dynamic shared memory each; with
   EEP_EMU_LSA every one of the W ranks' networks runs beside them.  false on a hang (past
   LIMIT_S: every process killed) or a crash; @p what names the launch in the messages. */
static bool launch_once(body_fn fn, const eep_epk_params_t *p, unsigned G, size_t dyn,
                        const char *what, int nranks)
{
    std::vector<pid_t> pids;
    time_t             start = time(NULL);
    bool               ok    = true;

    fflush(stdout);
#ifdef EEP_EMU_LSA
    std::vector<pid_t> nets; /* every rank's network, a silent one's too (it posts nothing) */
    g_net->stop = 0;
    for (int r = 0; r < W; r++) {
        pid_t pid = fork();

        if (pid == 0) {
            eep_gin_model_network(g_net, r);
            _exit(0);
        }
        nets.push_back(pid);
    }
    auto stop_nets = [&nets]() {
        int st;

        g_net->stop = 1;
        for (pid_t q : nets) {
            waitpid(q, &st, 0);
        }
    };
#endif
    for (int r = 0; r < nranks; r++) {
        if (is_dead(r)) {
            continue; /* a dead rank runs nothing */
        }
        for (unsigned b = 0; b < G; b++) {
            pid_t pid = fork();

            if (pid == 0) {
                run_block(fn, p[r], b, G, dyn);
                _exit(0);
            }
            pids.push_back(pid);
        }
    }
    size_t left = pids.size();
    while (left > 0) {
        int   st;
        pid_t pid = waitpid(-1, &st, WNOHANG);

        if (pid > 0) {
#ifdef EEP_EMU_LSA
            if (std::find(nets.begin(), nets.end(), pid) != nets.end()) {
                printf("%s: a network process ended early (status %d)\n", what, st);
                ok = false;
                continue;
            }
#endif
            left--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("%s: a block process failed (status %d)\n", what, st);
                ok = false;
            }
        } else if (time(NULL) - start > LIMIT_S) {
            printf("%s: HANG: blocks still running after %d s\n", what, LIMIT_S);
            for (pid_t q : pids) {
                kill(q, SIGKILL);
            }
#ifdef EEP_EMU_LSA
            for (pid_t q : nets) {
                kill(q, SIGKILL);
            }
#endif
            while (waitpid(-1, &st, 0) > 0) {
            }
            return false;
        } else {
            usleep(20000);
        }
    }
#ifdef EEP_EMU_LSA
    stop_nets(); /* every put of the launch delivered before the test reads */
#endif
    return ok;
}

/* One element's check: a mismatch counts in g_errors (the first 20 printed), every check in
   g_checks. */
static void check(bool cond, const char *what, int r, long long i)
{
    g_checks++;
    if (!cond && g_errors++ < 20) {
        printf("  MISMATCH %s (rank %d, index %lld)\n", what, r, i);
    }
}

#endif
