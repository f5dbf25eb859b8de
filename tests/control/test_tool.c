/*
 * test_tool.c - the control tools' shared helpers (control/tool/tool.h): the JSON string emitter
 * on hostile bytes, and strict numeric flags.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control/tool/tool.h"

static char *json_of(const char *s)
{
    static char buf[1024];
    FILE       *f = fmemopen(buf, sizeof(buf), "w");

    assert_non_null(f);
    eep_tool_json_str(f, s);
    fclose(f);
    return buf;
}

static void test_json_escapes(void **state)
{
    (void)state;
    assert_string_equal(json_of("plain"), "\"plain\"");
    assert_string_equal(json_of(NULL), "\"\"");
    assert_string_equal(json_of("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_string_equal(json_of("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
    assert_string_equal(json_of("\x01\x1f"), "\"\\u0001\\u001f\"");
    /* Valid UTF-8 passes (2, 3, 4 bytes); everything else is U+FFFD, one per bad byte. */
    assert_string_equal(json_of("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
                        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    assert_string_equal(json_of("a\xff"
                                "b"),
                        "\"a\\ufffdb\"");
    assert_string_equal(json_of("\xc0\xaf"), "\"\\ufffd\\ufffd\"");            /* overlong */
    assert_string_equal(json_of("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\""); /* surrogate */
    assert_string_equal(json_of("\xe2\x82"), "\"\\ufffd\\ufffd\"");            /* truncated */
}

static void test_parse_numbers(void **state)
{
    int64_t v = 42;

    (void)state;
    assert_int_equal(eep_tool_parse_i64("t", "--n", "17", 1, 100, &v), EEP_OK);
    assert_int_equal(v, 17);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "-5", -10, 10, &v), EEP_OK);
    assert_int_equal(v, -5);
    v = 42;
    assert_int_equal(eep_tool_parse_i64("t", "--n", "abc", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "5x", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", " 5", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "0", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "101", 1, 100, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "-1", 0, INT64_MAX, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", "99999999999999999999", 0, INT64_MAX, &v),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_tool_parse_i64("t", "--n", NULL, 0, 1, &v), EEP_ERR_INVALID_ARG);
    assert_int_equal(v, 42); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_escapes),
        cmocka_unit_test(test_parse_numbers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
