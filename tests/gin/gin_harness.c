/* tests/gin/gin_harness.c - the CPU tests' harness (gin_harness.h): dlopen of the plugin, forked
 * ranks on a shared board, bounded barriers, reaping under a deadline. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/gin/gin_harness.h"

#ifndef EEP_GIN_PLUGIN_PATH
#define EEP_GIN_PLUGIN_PATH "build/lib/libnccl-net-eep-gin.so"
#endif

int64_t gt_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t gt_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int gt_barrier(gt_t *t, int slot, int count, int timeout_ms)
{
    gt_board_t *b        = t->board;
    int         g        = __atomic_load_n(&b->gen[slot], __ATOMIC_ACQUIRE);
    int64_t     deadline = gt_now_ms() + timeout_ms;

    if (__atomic_add_fetch(&b->arrive[slot], 1, __ATOMIC_ACQ_REL) == count) {
        __atomic_store_n(&b->arrive[slot], 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&b->gen[slot], 1, __ATOMIC_RELEASE);
        return 0;
    }
    while (__atomic_load_n(&b->gen[slot], __ATOMIC_ACQUIRE) == g) {
        if (t->progress_coll != NULL) {
            t->gin->gin_progress(t->progress_coll);
        }
        if (gt_now_ms() > deadline) {
            fprintf(stderr, "rank %d: barrier %d timed out\n", t->rank, slot);
            return -1;
        }
        sched_yield();
    }
    return 0;
}

int gt_exchange(gt_t *t, int slot, const void *mine, void *all[GT_MAX_RANKS])
{
    int i;

    memcpy(t->board->handle[slot][t->rank], mine, EEP_NCCL_NET_HANDLE_MAXSIZE);
    if (gt_barrier(t, slot, t->nranks, 20000) != 0) {
        return -1;
    }
    for (i = 0; i < t->nranks; i++) {
        all[i] = t->board->handle[slot][i];
    }
    return 0;
}

int gt_gin_comm(gt_t *t, int slot, void **ctx_p, void **coll_p)
{
    char  handle[EEP_NCCL_NET_HANDLE_MAXSIZE];
    void *all[GT_MAX_RANKS];
    void *lc = NULL;

    if (ctx_p != NULL && t->gin->init(ctx_p, 0x1234, NULL) != EEP_NCCL_SUCCESS) {
        return -1;
    }
    if (t->gin->listen(ctx_p != NULL ? *ctx_p : NULL, 0, handle, &lc) != EEP_NCCL_SUCCESS ||
        gt_exchange(t, slot, handle, all) != 0 ||
        t->gin->connect(ctx_p != NULL ? *ctx_p : NULL, all, t->nranks, t->rank, lc, coll_p) !=
            EEP_NCCL_SUCCESS) {
        return -1;
    }
    t->gin->close_listen(lc);
    /* nobody reuses the slot's handles before everyone connected */
    return gt_barrier(t, slot, t->nranks, 20000);
}

int gt_gin_wait(gt_t *t, void *coll, void **reqs, int n, int timeout_ms)
{
    int64_t deadline = gt_now_ms() + timeout_ms;
    int     i        = 0, done;

    while (i < n) {
        done = 0;
        if (t->gin->test(coll, reqs[i], &done) != EEP_NCCL_SUCCESS) {
            return -1;
        }
        if (done) {
            i++;
            continue;
        }
        if (gt_now_ms() > deadline) {
            return -2;
        }
    }
    return 0;
}

int gt_gin_wait_word(gt_t *t, void *coll, const uint64_t *word, uint64_t expect, int timeout_ms)
{
    int64_t  deadline = gt_now_ms() + timeout_ms;
    uint64_t v;

    while ((v = __atomic_load_n(word, __ATOMIC_ACQUIRE)) != expect) {
        if (v > expect) {
            fprintf(stderr, "rank %d: word %llu passed %llu\n", t->rank, (unsigned long long)v,
                    (unsigned long long)expect);
            return -1;
        }
        t->gin->gin_progress(coll);
        if (gt_now_ms() > deadline) {
            fprintf(stderr, "rank %d: word %llu, waited for %llu\n", t->rank, (unsigned long long)v,
                    (unsigned long long)expect);
            return -1;
        }
    }
    return 0;
}

/* Runs one case: its ranks forked, reaped within the case's deadline. */
static int gt_run_case(const gt_case_t *c, const eep_nccl_net_v11_t *net,
                       const eep_nccl_gin_v11_t *gin)
{
    gt_board_t *board;
    pid_t       pids[GT_MAX_RANKS];
    int         i, status, ok = 1, left = c->nranks;
    int64_t     deadline = gt_now_ms() + (int64_t)c->timeout_s * 1000;

    board = mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (board == MAP_FAILED) {
        return 0;
    }
    memset(board, 0, sizeof(*board));
    fflush(NULL);
    for (i = 0; i < c->nranks; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            gt_t t = { .rank = i, .nranks = c->nranks, .board = board, .net = net, .gin = gin };
            int  rc;

            alarm((unsigned)c->timeout_s + 5); /* a rank outliving its parent's deadline dies */
            rc = c->fn(&t);
            fflush(NULL);
            _exit(rc == 0 ? 0 : 1);
        }
        if (pids[i] < 0) {
            ok   = 0;
            left = i;
            break;
        }
    }
    while (left > 0) {
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid > 0) {
            for (i = 0; i < c->nranks; i++) {
                if (pids[i] == pid) {
                    int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
                    int want   = (c->killed_mask >> i) & 1;

                    if (want ? !killed : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                        fprintf(stderr, "  rank %d: %s %d\n", i,
                                WIFSIGNALED(status) ? "signal" : "exit",
                                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                        ok = 0;
                    }
                    pids[i] = 0;
                    left--;
                }
            }
            continue;
        }
        if (gt_now_ms() > deadline) {
            fprintf(stderr, "  %s: deadline of %d s passed, killing the ranks left\n", c->name,
                    c->timeout_s);
            for (i = 0; i < c->nranks; i++) {
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], &status, 0);
                    pids[i] = 0;
                    left--;
                }
            }
            ok = 0;
            break;
        }
        usleep(2000);
    }
    munmap(board, sizeof(*board));
    return ok;
}

static void *gt_lib; /* the plugin, as gt_main loaded it */

void *gt_plugin_sym(const char *name)
{
    return gt_lib != NULL ? dlsym(gt_lib, name) : NULL;
}

int gt_main(const gt_case_t *cases, int ncases)
{
    void                     *lib;
    const eep_nccl_net_v11_t *net;
    const eep_nccl_gin_v11_t *gin;
    const char               *path = getenv("EEP_GIN_PLUGIN");
    int                       i, passed = 0, failed = 0;
    int64_t                   start;

    if (path == NULL) {
        path = EEP_GIN_PLUGIN_PATH;
    }
    lib    = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    gt_lib = lib;
    if (lib == NULL) {
        fprintf(stderr, "cannot load the plugin %s: %s\n", path, dlerror());
        return 1;
    }
    net = dlsym(lib, "ncclNetPlugin_v11");
    gin = dlsym(lib, "ncclGinPlugin_v11");
    if (net == NULL || gin == NULL) {
        fprintf(stderr, "%s lacks ncclNetPlugin_v11 or ncclGinPlugin_v11\n", path);
        return 1;
    }
    printf("[==========] Running %d test(s).\n", ncases);
    for (i = 0; i < ncases; i++) {
        printf("[ RUN      ] %s (%d ranks)\n", cases[i].name, cases[i].nranks);
        start = gt_now_ms();
        if (gt_run_case(&cases[i], net, gin)) {
            printf("[       OK ] %s (%lld ms)\n", cases[i].name, (long long)(gt_now_ms() - start));
            passed++;
        } else {
            printf("[  FAILED  ] %s (%lld ms)\n", cases[i].name, (long long)(gt_now_ms() - start));
            failed++;
        }
        fflush(stdout);
    }
    printf("[==========] %d test(s) run.\n", ncases);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (failed > 0) {
        printf("[  FAILED  ] %d test(s).\n", failed);
    }
    return failed == 0 ? 0 : 1;
}
