/*
 * test_config.c - knob parsing (every type, bounds, bad values), precedence (environment, then
 * EEP_CONFIG_FILE, then default), run-time vs startup knobs, the unknown-variable warning, and the
 * log line format and level filter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/config.h"
#include "util/log.h"

typedef struct {
    int      flag;
    int64_t  count;
    uint64_t bytes;
    double   ratio;
    char     name[EEP_KNOB_STRING_MAX];
} test_config_t;

static const eep_knob_t test_knobs[] = {
    { "EEP_TEST_FLAG", "no", "a bool", EEP_KNOB_BOOL, offsetof(test_config_t, flag),
      EEP_KNOB_RUNTIME, 0, 0 },
    { "EEP_TEST_COUNT", "7", "an int in [1, 100]", EEP_KNOB_INT, offsetof(test_config_t, count),
      EEP_KNOB_STARTUP, 1, 100 },
    { "EEP_TEST_BYTES", "4K", "a size", EEP_KNOB_SIZE, offsetof(test_config_t, bytes),
      EEP_KNOB_STARTUP, 0, 0 },
    { "EEP_TEST_RATIO", "0.5", "a double", EEP_KNOB_DOUBLE, offsetof(test_config_t, ratio),
      EEP_KNOB_STARTUP, 0, 0 },
    { "EEP_TEST_NAME", "default-name", "a string", EEP_KNOB_STRING, offsetof(test_config_t, name),
      EEP_KNOB_STARTUP, 0, 0 },
};

static const eep_knob_table_t test_table = {
    .module      = "test",
    .knobs       = test_knobs,
    .count       = 5,
    .struct_size = sizeof(test_config_t),
};

static int  hook_warnings, hook_errors;
static char hook_last[1024];

static void hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *msg, void *arg)
{
    (void)subsys;
    (void)arg;
    hook_warnings += level == EEP_LOG_LEVEL_WARN;
    hook_errors += level == EEP_LOG_LEVEL_ERROR;
    snprintf(hook_last, sizeof(hook_last), "%s", msg);
}

static int setup(void **state)
{
    (void)state;
    unsetenv("EEP_TEST_FLAG");
    unsetenv("EEP_TEST_COUNT");
    unsetenv("EEP_TEST_BYTES");
    unsetenv("EEP_TEST_RATIO");
    unsetenv("EEP_TEST_NAME");
    unsetenv("EEP_CONFIG_FILE");
    hook_warnings = hook_errors = 0;
    hook_last[0]                = '\0';
    eep_log_set_level(EEP_LOG_LEVEL_WARN);
    eep_log_set_hook(hook, NULL);
    return 0;
}

static void test_defaults(void **state)
{
    test_config_t cfg;

    (void)state;
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_OK);
    assert_int_equal(cfg.flag, 0);
    assert_int_equal(cfg.count, 7);
    assert_int_equal(cfg.bytes, 4096);
    assert_true(cfg.ratio == 0.5);
    assert_string_equal(cfg.name, "default-name");
}

static void test_environment_values(void **state)
{
    test_config_t cfg;

    (void)state;
    setenv("EEP_TEST_FLAG", "on", 1);
    setenv("EEP_TEST_COUNT", "0x10", 1);
    setenv("EEP_TEST_BYTES", "3M", 1);
    setenv("EEP_TEST_RATIO", "1e-3", 1);
    setenv("EEP_TEST_NAME", "x y", 1);
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_OK);
    assert_int_equal(cfg.flag, 1);
    assert_int_equal(cfg.count, 16);
    assert_int_equal(cfg.bytes, 3u << 20);
    assert_true(cfg.ratio == 1e-3);
    assert_string_equal(cfg.name, "x y");
}

/* Each bad value is refused with an error naming the knob and the value. */
static void test_bad_values_name_the_knob(void **state)
{
    static const struct {
        const char *name, *value;
    } bad[] = {
        { "EEP_TEST_FLAG", "maybe" }, { "EEP_TEST_COUNT", "12abc" }, { "EEP_TEST_COUNT", "0" },
        { "EEP_TEST_COUNT", "101" },  { "EEP_TEST_BYTES", "-1" },    { "EEP_TEST_BYTES", "5T" },
        { "EEP_TEST_BYTES", "" },     { "EEP_TEST_RATIO", "half" },
    };
    test_config_t cfg;
    size_t        i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setup(NULL);
        setenv(bad[i].name, bad[i].value, 1);
        assert_int_equal(eep_config_load(&test_table, &cfg), EEP_ERR_INVALID_ARG);
        assert_int_equal(hook_errors, 1);
        assert_non_null(strstr(hook_last, bad[i].name));
        unsetenv(bad[i].name);
    }
}

static void test_string_too_long(void **state)
{
    char          big[EEP_KNOB_STRING_MAX + 10];
    test_config_t cfg;

    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    setenv("EEP_TEST_NAME", big, 1);
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(hook_last, "EEP_TEST_NAME"));
}

/* Environment beats the config file, which beats the default; later lines of the file win. */
static void test_config_file_precedence(void **state)
{
    char          path[] = "/tmp/eep-test-config-XXXXXX";
    test_config_t cfg;
    FILE         *f;
    int           fd;

    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fprintf(f, "# comment\n\nEEP_TEST_COUNT=42\nEEP_TEST_NAME=from-file\n"
               "EEP_TEST_NAME=from-file-later\nEEP_TEST_COUNTX=99\n");
    fclose(f);
    setenv("EEP_CONFIG_FILE", path, 1);
    setenv("EEP_TEST_COUNT", "9", 1);
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_OK);
    assert_int_equal(cfg.count, 9);                   /* environment */
    assert_string_equal(cfg.name, "from-file-later"); /* file */
    assert_int_equal(cfg.bytes, 4096);                /* default */
    unlink(path);
}

/* A value in the file too long for its knob is an error naming it, never silently cut short. */
static void test_config_file_long_value(void **state)
{
    char          path[] = "/tmp/eep-test-config-XXXXXX";
    test_config_t cfg;
    FILE         *f;
    int           fd, i;

    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fprintf(f, "EEP_TEST_NAME=");
    for (i = 0; i < EEP_KNOB_STRING_MAX + 100; i++) {
        fputc('x', f);
    }
    fprintf(f, "\nEEP_TEST_COUNT=12\n");
    fclose(f);
    setenv("EEP_CONFIG_FILE", path, 1);
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(hook_last, "EEP_TEST_NAME"));
    unlink(path);
}

static void test_set_runtime_vs_startup(void **state)
{
    test_config_t cfg;

    (void)state;
    assert_int_equal(eep_config_load(&test_table, &cfg), EEP_OK);
    assert_int_equal(eep_config_set(&test_table, &cfg, "EEP_TEST_FLAG", "yes", 0), EEP_OK);
    assert_int_equal(cfg.flag, 1);
    assert_int_equal(eep_config_set(&test_table, &cfg, "EEP_TEST_COUNT", "5", 0), EEP_ERR_BUSY);
    assert_int_equal(cfg.count, 7);
    assert_int_equal(eep_config_set(&test_table, &cfg, "EEP_TEST_COUNT", "5", 1), EEP_OK);
    assert_int_equal(cfg.count, 5);
    assert_int_equal(eep_config_set(&test_table, &cfg, "EEP_TEST_NOPE", "5", 1), EEP_ERR_NOT_FOUND);
}

static void test_unknown_variable_warning(void **state)
{
    (void)state;
    assert_int_equal(eep_config_check_env(), 0);
    assert_int_equal(hook_warnings, 0);
    setenv("EEP_LOG_LEVL", "debug", 1); /* a typo of a real knob */
    assert_int_equal(eep_config_check_env(), 1);
    assert_int_equal(hook_warnings, 1);
    assert_non_null(strstr(hook_last, "EEP_LOG_LEVL"));
    unsetenv("EEP_LOG_LEVL");
    setenv("EEP_LOG_LEVEL", "warn", 1); /* a real one draws nothing */
    assert_int_equal(eep_config_check_env(), 0);
    unsetenv("EEP_LOG_LEVEL");
}

/* Every registered knob has a name starting EEP_, a doc, a default that parses, and one owner:
   no name is in two tables (EEP_JOB was, in agent's and eepd's).  This program links every table
   (tests/module.mk: all of libeep and the control plane's tables), as eep-info does. */
static void test_registry_is_well_formed(void **state)
{
    const eep_knob_table_t *const *tables;
    size_t                         n, t, u, i, j;
    void                          *cfg;

    (void)state;
    tables = eep_config_tables(&n);
    assert_true(n >= 7); /* core, jit, runtime, ep, etcd, eepd, agent */
    for (t = 0; t < n; t++) {
        cfg = calloc(1, tables[t]->struct_size);
        assert_non_null(cfg);
        for (i = 0; i < tables[t]->count; i++) {
            const eep_knob_t *k = &tables[t]->knobs[i];

            assert_true(strncmp(k->name, "EEP_", 4) == 0);
            assert_true(strlen(k->doc) > 5);
            assert_true(k->offset < tables[t]->struct_size);
            unsetenv(k->name);
            for (j = 0; j < i; j++) {
                assert_string_not_equal(k->name, tables[t]->knobs[j].name);
            }
            for (u = 0; u < t; u++) {
                for (j = 0; j < tables[u]->count; j++) {
                    assert_string_not_equal(k->name, tables[u]->knobs[j].name);
                }
            }
            /* and the generated list of the tree's names (the unknown-variable warning) has it */
            assert_true(eep_config_known_name(k->name, strlen(k->name)));
        }
        assert_int_equal(eep_config_load(tables[t], cfg), EEP_OK);
        free(cfg);
    }
}

/* A table declaring a name that a registered table owns is refused, naming both; registering the
   same table twice keeps it once. */
typedef struct {
    char level[EEP_KNOB_STRING_MAX];
} dup_config_t;

static const eep_knob_t dup_knobs[] = {
    EEP_KNOB_ROW(dup_config_t, "EEP_LOG_LEVEL", "warn", EEP_KNOB_STRING, level, EEP_KNOB_STARTUP, 0,
                 0, "A second owner of the core's knob."),
};
static const eep_knob_table_t dup_table = {
    .module      = "dup",
    .knobs       = dup_knobs,
    .count       = 1,
    .struct_size = sizeof(dup_config_t),
};

static void test_register_refuses_a_second_owner(void **state)
{
    const eep_knob_table_t *const *tables;
    size_t                         before, after, t;

    (void)state;
    tables = eep_config_tables(&before);
    assert_true(before >= 1);
    assert_int_equal(eep_config_register(&dup_table), EEP_ERR_EXISTS);
    assert_int_equal(eep_config_register(tables[0]), EEP_OK); /* already there: kept once */
    tables = eep_config_tables(&after);
    assert_int_equal(after, before);
    for (t = 0; t < after; t++) {
        assert_ptr_not_equal(tables[t], &dup_table);
    }
}

/* The identity prefix "host:pid:tid [rank] level subsys" is on every line; the filter works. */
static void test_log_line_format(void **state)
{
    char  path[] = "/tmp/eep-test-log-XXXXXX";
    char  line[4096], host[64], expect[160];
    int   fd, saved;
    FILE *f;

    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    eep_log_set_rank(3);
    eep_log_set_level(EEP_LOG_LEVEL_INFO);
    eep_info(EEP_SUBSYS_JIT, "hello %d", 42);
    eep_debug(EEP_SUBSYS_JIT, "filtered out");
    eep_log_set_rank(-1);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    f = fdopen(fd, "r");
    rewind(f);
    assert_non_null(fgets(line, sizeof(line), f));
    gethostname(host, sizeof(host));
    snprintf(expect, sizeof(expect), "%s:%d:", host, (int)getpid());
    assert_true(strncmp(line, expect, strlen(expect)) == 0);
    assert_non_null(strstr(line, " [3] info jit "));
    assert_non_null(strstr(line, "hello 42"));
    assert_null(fgets(line, sizeof(line), f)); /* the debug line was filtered */
    fclose(f);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, setup),
        cmocka_unit_test_setup(test_environment_values, setup),
        cmocka_unit_test_setup(test_bad_values_name_the_knob, setup),
        cmocka_unit_test_setup(test_string_too_long, setup),
        cmocka_unit_test_setup(test_config_file_precedence, setup),
        cmocka_unit_test_setup(test_config_file_long_value, setup),
        cmocka_unit_test_setup(test_set_runtime_vs_startup, setup),
        cmocka_unit_test_setup(test_unknown_variable_warning, setup),
        cmocka_unit_test_setup(test_registry_is_well_formed, setup),
        cmocka_unit_test_setup(test_register_refuses_a_second_owner, setup),
        cmocka_unit_test_setup(test_log_line_format, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
