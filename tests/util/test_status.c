/* test_status.c - every status code has a name, a string and the class its range promises. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "eep/status.h"
#include "util/log.h"

static const struct {
    eep_status_t       status;
    eep_status_class_t cls;
} all_codes[] = {
    { EEP_OK, EEP_CLASS_OK },
    { EEP_INPROGRESS, EEP_CLASS_OK },
    { EEP_ERR_INVALID_ARG, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_UNSUPPORTED, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_VERSION_MISMATCH, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_BUSY, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_NOT_FOUND, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_EXISTS, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_STALE_EPOCH, EEP_CLASS_INVALID_ARG },
    { EEP_ERR_NO_MEMORY, EEP_CLASS_RESOURCE },
    { EEP_ERR_NO_RESOURCE, EEP_CLASS_RESOURCE },
    { EEP_ERR_IO, EEP_CLASS_RESOURCE },
    { EEP_ERR_JIT, EEP_CLASS_RESOURCE },
    { EEP_ERR_TIMEOUT, EEP_CLASS_RESOURCE },
    { EEP_ERR_PEER_TIMEOUT, EEP_CLASS_PEER_LOST },
    { EEP_ERR_PEER_LOST, EEP_CLASS_PEER_LOST },
    { EEP_ERR_GROUP_LOST, EEP_CLASS_GROUP_LOST },
    { EEP_ERR_ABORTED, EEP_CLASS_GROUP_LOST },
    { EEP_ERR_FENCED, EEP_CLASS_GROUP_LOST },
    { EEP_ERR_NO_DEVICE, EEP_CLASS_LOCAL_GPU },
    { EEP_ERR_CUDA, EEP_CLASS_LOCAL_GPU },
    { EEP_ERR_NCCL, EEP_CLASS_LOCAL_GPU },
    { EEP_ERR_DEVICE_FAULT, EEP_CLASS_LOCAL_GPU },
    { EEP_ERR_CONTROL_UNAVAILABLE, EEP_CLASS_CONTROL },
    { EEP_ERR_ETCD, EEP_CLASS_CONTROL },
    { EEP_ERR_RPC, EEP_CLASS_CONTROL },
    { EEP_ERR_LEASE_LOST, EEP_CLASS_CONTROL },
    { EEP_ERR_NOT_LEADER, EEP_CLASS_CONTROL },
    { EEP_ERR_PERMISSION, EEP_CLASS_CONTROL },
    { EEP_ERR_INTERNAL, EEP_CLASS_INTERNAL },
};

#define N_CODES (sizeof(all_codes) / sizeof(all_codes[0]))

static void test_every_code_has_a_name_and_string(void **state)
{
    size_t i, j;

    (void)state;
    for (i = 0; i < N_CODES; i++) {
        const char *name = eep_status_name(all_codes[i].status);
        const char *text = eep_status_string(all_codes[i].status);

        assert_string_not_equal(name, "EEP_UNKNOWN");
        assert_string_not_equal(text, "unknown status");
        assert_true(strncmp(name, "EEP_", 4) == 0);
        for (j = 0; j < i; j++) { /* strings are distinct, so a log line says which error */
            assert_string_not_equal(text, eep_status_string(all_codes[j].status));
        }
    }
}

/* Every value in the error range that is not in the enum must say so (the table is complete). */
static void test_unknown_codes(void **state)
{
    int code, i, known;

    (void)state;
    for (code = -130; code <= 2; code++) {
        known = 0;
        for (i = 0; i < (int)N_CODES; i++) {
            known |= (int)all_codes[i].status == code;
        }
        if (!known) {
            assert_string_equal(eep_status_string((eep_status_t)code), "unknown status");
            assert_string_equal(eep_status_name((eep_status_t)code), "EEP_UNKNOWN");
        }
    }
}

static void test_classes(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < N_CODES; i++) {
        assert_int_equal(eep_status_class(all_codes[i].status), all_codes[i].cls);
        assert_string_not_equal(eep_status_class_string(all_codes[i].cls), "unknown class");
    }
}

static int  hook_errors;
static char hook_last[512];

static void count_hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *msg, void *arg)
{
    (void)subsys;
    (void)arg;
    if (level == EEP_LOG_LEVEL_ERROR) {
        hook_errors++;
        snprintf(hook_last, sizeof(hook_last), "%s", msg);
    }
}

static void test_errno_translation_logs(void **state)
{
    (void)state;
    eep_log_set_hook(count_hook, NULL);
    assert_int_equal(eep_status_from_errno(0, "nothing"), EEP_OK);
    assert_int_equal(hook_errors, 0);
    assert_int_equal(eep_status_from_errno(ENOMEM, "malloc"), EEP_ERR_NO_MEMORY);
    assert_int_equal(eep_status_from_errno(EINVAL, "ioctl"), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_status_from_errno(ENOENT, "open(/x)"), EEP_ERR_NOT_FOUND);
    assert_int_equal(eep_status_from_errno(ETIMEDOUT, "connect"), EEP_ERR_TIMEOUT);
    assert_int_equal(eep_status_from_errno(ECONNREFUSED, "connect"), EEP_ERR_CONTROL_UNAVAILABLE);
    assert_int_equal(eep_status_from_errno(EIO, "read"), EEP_ERR_IO);
    assert_int_equal(hook_errors, 6);
    assert_non_null(strstr(hook_last, "read failed"));
    assert_non_null(strstr(hook_last, strerror(EIO)));
    eep_log_set_hook(NULL, NULL);
}

/* The last error message is kept per thread whatever the log level (a binding raises it with the
   status), replaced by the next error, and cleared on request. */
static void test_last_error(void **state)
{
    (void)state;
    eep_last_error_clear();
    assert_string_equal(eep_last_error(), "");
    eep_log_set_level(EEP_LOG_LEVEL_NONE); /* nothing printed, the message still kept */
    eep_error(EEP_SUBSYS_TEST, "dispatch: num_topk %d is out of range", 99);
    assert_string_equal(eep_last_error(), "dispatch: num_topk 99 is out of range");
    eep_warn(EEP_SUBSYS_TEST, "a warning is not an error");
    assert_string_equal(eep_last_error(), "dispatch: num_topk 99 is out of range");
    eep_error(EEP_SUBSYS_TEST, "second");
    assert_string_equal(eep_last_error(), "second");
    eep_last_error_clear();
    assert_string_equal(eep_last_error(), "");
    eep_log_set_level(EEP_LOG_LEVEL_WARN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_a_name_and_string),
        cmocka_unit_test(test_unknown_codes),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_errno_translation_logs),
        cmocka_unit_test(test_last_error),
    };

    eep_log_set_level(EEP_LOG_LEVEL_NONE + 1); /* errors only, through the hook */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
