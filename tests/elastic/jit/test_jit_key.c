/*
 * test_jit_key.c - the JIT cache key covers exactly what shapes the cubin.
 *
 * No compiler runs here: keys are computed from generated units and header trees written to
 * temp source roots.  A change in a header three includes deep changes the key; rewriting it
 * with the same bytes (a touch) does not; a header nobody includes does not; a copy of the tree
 * elsewhere keys the same; template arguments, flags, arch and backend all change it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <utime.h>

#include "elastic/jit/jit_int.h"
#include "tests/common/jit_test_util.h"

static char *root, *root2, *cache;

static const char *const top_h =
    "#pragma once\n#include \"inc/mid.h\"\n"
    "template <int N> __device__ void k_body(const k_params_t &p) { p.out[0] = N + LEAF; }\n";
static const char *const mid_h =
    "#pragma once\n  #  include \"../deep/leaf.h\"\n#include <nccl.h>\n#include <cuda_runtime.h>\n"
    "typedef struct { int *out; } k_params_t;\n";
static const char *const leaf_h = "#pragma once\n#include \"sib.h\"\n#define LEAF 1\n";
static const char *const sib_h  = "#pragma once\n#define SIB 2\n";

static void make_tree(const char *dir)
{
    jt_write(dir, "probe/top.cuh", top_h);
    jt_write(dir, "probe/inc/mid.h", mid_h);
    jt_write(dir, "probe/deep/leaf.h", leaf_h);
    jt_write(dir, "probe/deep/sib.h", sib_h);
    jt_write(dir, "probe/unrelated.h", "#pragma once\n");
}

static int setup(void **state)
{
    (void)state;
    root  = jt_mkdtemp("jitkey-root");
    root2 = jt_mkdtemp("jitkey-root2");
    cache = jt_mkdtemp("jitkey-cache");
    make_tree(root);
    make_tree(root2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    jt_rm_rf(root);
    jt_rm_rf(root2);
    jt_rm_rf(cache);
    return 0;
}

static eep_jit_spec_t base_spec(void)
{
    eep_jit_spec_t spec = { .size          = sizeof(spec),
                            .header        = "probe/top.cuh",
                            .function      = "k_body",
                            .template_args = "3",
                            .param_type    = "k_params_t",
                            .backend       = EEP_JIT_BACKEND_NVRTC };
    return spec;
}

static void key_of(const char *src_root, const char *arch, const eep_jit_spec_t *spec,
                   char key_p[EEP_SHA256_HEX])
{
    eep_jit_params_t params = {
        .size = sizeof(params), .cache_dir = cache, .source_root = src_root, .arch = arch
    };
    eep_jit_unit_t unit;
    eep_jit_t     *jit;

    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    assert_int_equal(eep_jit_unit_build(jit, spec, &unit), EEP_OK);
    assert_int_equal(eep_jit_unit_key(jit, &unit), EEP_OK);
    memcpy(key_p, unit.key, EEP_SHA256_HEX);
    assert_int_equal(strlen(key_p), 64);
    eep_jit_unit_cleanup(&unit);
    eep_jit_destroy(jit);
}

static void test_nested_header_change(void **state)
{
    eep_jit_spec_t spec = base_spec();
    char           k0[EEP_SHA256_HEX], k1[EEP_SHA256_HEX], path[4096];

    (void)state;
    key_of(root, NULL, &spec, k0);
    key_of(root, NULL, &spec, k1);
    assert_string_equal(k0, k1); /* deterministic */

    /* sib.h is top -> mid -> leaf -> sib, reached through "../" and a same-folder include */
    jt_write(root, "probe/deep/sib.h", "#pragma once\n#define SIB 3\n");
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);

    /* same bytes again, and a later mtime: the key is about content */
    jt_write(root, "probe/deep/sib.h", sib_h);
    snprintf(path, sizeof(path), "%s/probe/deep/sib.h", root);
    assert_int_equal(utime(path, &(struct utimbuf){ .actime = 2000000000, .modtime = 2000000000 }),
                     0);
    key_of(root, NULL, &spec, k1);
    assert_string_equal(k0, k1);

    /* a header nobody includes is not part of it */
    jt_write(root, "probe/unrelated.h", "#pragma once\n#define X 1\n");
    key_of(root, NULL, &spec, k1);
    assert_string_equal(k0, k1);

    /* the directly included header too */
    jt_write(root, "probe/inc/mid.h",
             "#pragma once\n#include \"../deep/leaf.h\"\n#include <nccl.h>\n"
             "typedef struct { int *out; } k_params_t;\n");
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);
    jt_write(root, "probe/inc/mid.h", mid_h);
    key_of(root, NULL, &spec, k1);
    assert_string_equal(k0, k1);
}

static void test_tree_copy_keys_the_same(void **state)
{
    eep_jit_spec_t spec = base_spec();
    char           k0[EEP_SHA256_HEX], k1[EEP_SHA256_HEX];

    (void)state;
    key_of(root, NULL, &spec, k0);
    key_of(root2, NULL, &spec, k1);
    assert_string_equal(k0, k1);
}

static void test_every_input_counts(void **state)
{
    eep_jit_spec_t spec = base_spec();
    char           k0[EEP_SHA256_HEX], k1[EEP_SHA256_HEX];

    (void)state;
    key_of(root, NULL, &spec, k0);
    spec.template_args = "4";
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);

    spec             = base_spec();
    spec.extra_flags = "-DEXTRA=1";
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);

    spec               = base_spec();
    spec.launch_bounds = 128;
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);

    spec = base_spec();
    key_of(root, "sm_100", &spec, k1);
    assert_string_not_equal(k0, k1);

    spec.backend = EEP_JIT_BACKEND_NVCC;
    key_of(root, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);
}

/* The real LSA probe keys (NCCL's headers are read, the toolkit's are not) in a few ms. */
static void test_lsa_probe_key(void **state)
{
    eep_jit_spec_t spec = { .size          = sizeof(spec),
                            .header        = "kernels/probe/lsa_probe.cuh",
                            .function      = "eep_lsa_probe_body",
                            .template_args = "1",
                            .param_type    = "eep_lsa_probe_params_t" };
    char           k0[EEP_SHA256_HEX], k1[EEP_SHA256_HEX];

    (void)state;
    key_of(EEP_TEST_SOURCE_ROOT, NULL, &spec, k0);
    spec.needs_gin = 1; /* auto picks nvcc for it */
    key_of(EEP_TEST_SOURCE_ROOT, NULL, &spec, k1);
    assert_string_not_equal(k0, k1);
}

static void set_old_mtime(const char *rel, time_t when)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    assert_int_equal(utime(path, &(struct utimbuf){ .actime = when, .modtime = when }), 0);
}

static void key_with(eep_jit_t *jit, const eep_jit_spec_t *spec, char key_p[EEP_SHA256_HEX])
{
    eep_jit_unit_t unit;

    assert_int_equal(eep_jit_unit_build(jit, spec, &unit), EEP_OK);
    assert_int_equal(eep_jit_unit_key(jit, &unit), EEP_OK);
    memcpy(key_p, unit.key, EEP_SHA256_HEX);
    eep_jit_unit_cleanup(&unit);
}

/* One jit object keys repeatedly (its header memo is used) and still sees every edit. */
static void test_memo_sees_edits(void **state)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = base_spec();
    char             k0[EEP_SHA256_HEX], k1[EEP_SHA256_HEX], path[4096];
    struct stat      st;
    eep_jit_t       *jit;
    size_t           i;
    int              memoised = 0, tries;

    (void)state;
    snprintf(path, sizeof(path), "%s/probe/deep/sib.h", root);
    set_old_mtime("probe/deep/sib.h", 1500000000);
    assert_int_equal(stat(path, &st), 0);
    /* The memo skips files changed in the current second (ctime): let one second pass. */
    for (tries = 0; tries < 300 && time(NULL) <= st.st_ctim.tv_sec; tries++) {
        usleep(10 * 1000);
    }
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    jit->memo_racy_s = 0;
    key_with(jit, &spec, k0);
    for (i = 0; i < jit->n_memo; i++) {
        memoised |= strcmp(jit->memo[i].path, path) == 0;
    }
    assert_true(memoised);
    key_with(jit, &spec, k1);
    assert_string_equal(k0, k1);
    /* same size, and the same old mtime put back: only ctime and the bytes differ */
    jt_write(root, "probe/deep/sib.h", "#pragma once\n#define SIB 9\n");
    set_old_mtime("probe/deep/sib.h", 1500000000);
    key_with(jit, &spec, k1);
    assert_string_not_equal(k0, k1);
    jt_write(root, "probe/deep/sib.h", sib_h);
    key_with(jit, &spec, k1);
    assert_string_equal(k0, k1);
    eep_jit_destroy(jit);
}

static void test_bad_specs(void **state)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec;
    eep_jit_unit_t   unit;
    eep_jit_t       *jit;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    jt_hook_reset();
    spec        = base_spec();
    spec.header = "../etc/passwd";
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(jt_hook_last, "relative"));
    spec        = base_spec();
    spec.header = "probe/missing.cuh";
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(jt_hook_last, "not found"));
    spec          = base_spec();
    spec.function = NULL;
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_INVALID_ARG);
    spec               = base_spec();
    spec.template_args = "1>(p); } int x; template <int";
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_INVALID_ARG);
    spec      = base_spec();
    spec.size = 8;
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_INVALID_ARG);
    spec           = base_spec();
    spec.needs_gin = 1; /* forced NVRTC cannot do GIN */
    assert_int_equal(eep_jit_unit_build(jit, &spec, &unit), EEP_ERR_UNSUPPORTED);
    assert_non_null(strstr(jt_hook_last, "NVRTC"));
    eep_jit_destroy(jit);
    eep_jit_destroy(NULL);
}

/* EEP_JIT_ARCH defaults to auto: the device in use, and without a loaded driver (this test
 * loads none) sm_90, the same key as naming it; a named arch wins; garbage is refused. */
static void test_arch_auto(void **state)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = base_spec();
    char             k_auto[EEP_SHA256_HEX], k_90[EEP_SHA256_HEX];
    eep_jit_t       *jit = NULL;

    (void)state;
    unsetenv("EEP_JIT_ARCH");
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    assert_string_equal(eep_jit_arch(jit), "sm_90");
    eep_jit_destroy(jit);
    params.arch = "sm_80";
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    assert_string_equal(eep_jit_arch(jit), "sm_80");
    eep_jit_destroy(jit);
    setenv("EEP_JIT_ARCH", "sm_100", 1);
    params.arch = NULL;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    assert_string_equal(eep_jit_arch(jit), "sm_100");
    eep_jit_destroy(jit);
    setenv("EEP_JIT_ARCH", "automatic", 1);
    jit = NULL;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_ERR_INVALID_ARG);
    assert_null(jit);
    assert_non_null(strstr(jt_hook_last, "automatic"));
    unsetenv("EEP_JIT_ARCH");
    key_of(root, "auto", &spec, k_auto);
    key_of(root, "sm_90", &spec, k_90);
    assert_string_equal(k_auto, k_90);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_header_change),
        cmocka_unit_test(test_tree_copy_keys_the_same),
        cmocka_unit_test(test_every_input_counts),
        cmocka_unit_test(test_lsa_probe_key),
        cmocka_unit_test(test_memo_sees_edits),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_arch_auto),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    eep_log_set_hook(jt_hook, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
