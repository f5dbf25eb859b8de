/*
 * ep_jit_test_util.h - shared pieces of the EP kernel compile tests (test_ep_jit.c,
 * test_ep_baseline_jit.c): compile one spec with NVRTC and check the cache hit, and the
 * skip/temp-cache-dir frame around main().  Header-only (static functions); include after cmocka.h.
 */
#ifndef EEP_EP_JIT_TEST_UTIL_H
#define EEP_EP_JIT_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit.h"

/* Compile @p spec (fails the test with the compiler log), then check a second compile is a hit;
   @p info_p (may be NULL) gets that hit's info (the cache entry's path). */
static inline void ep_jit_compile_check(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                        eep_jit_info_t *info_p)
{
    eep_jit_info_t info;
    eep_status_t   status = eep_jit_compile(jit, spec, &info);

    if (status != EEP_OK) {
        fail_msg("%s<%s>: %s\n%s", spec->function, spec->template_args ? spec->template_args : "",
                 eep_status_string(status), eep_jit_last_log());
    }
    /* A second compile is a cache hit. */
    assert_int_equal(eep_jit_compile(jit, spec, &info), EEP_OK);
    assert_true(info.cache_hit);
    if (info_p != NULL) {
        *info_p = info;
    }
}

/*
 * Before the tests: skip (77, with the reason printed) when NVRTC cannot be loaded, else make the
 * cache dir from the template @p cache_dir.  @return -1 to go on, else main()'s exit code.
 */
static inline int ep_jit_test_begin(char *cache_dir)
{
    const eep_cuda_sym_t *sym;

    if (eep_cuda_sym_nvrtc(&sym) != EEP_OK) {
        printf("skip: NVRTC cannot be loaded here\n");
        return 77;
    }
    if (mkdtemp(cache_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    return -1;
}

/* After the tests: remove the cache dir made by ep_jit_test_begin(). */
static inline void ep_jit_test_end(const char *cache_dir)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", cache_dir);
    }
}

#endif
