/* test_sha256.c - SHA-256 against FIPS 180-4 known answers, and incremental == one-shot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "util/sha256.h"

static void check_hex(const void *data, size_t len, const char *want)
{
    uint8_t digest[EEP_SHA256_BYTES];
    char    hex[EEP_SHA256_HEX];

    eep_sha256(data, len, digest);
    eep_sha256_hex(digest, hex);
    assert_string_equal(hex, want);
}

static void test_known_answers(void **state)
{
    static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    static const char four_blocks[] =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
        "lmnopqrsmnopqrstnopqrstu";

    (void)state;
    check_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_hex(two_blocks, strlen(two_blocks),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    check_hex(four_blocks, strlen(four_blocks),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void **state)
{
    eep_sha256_t ctx;
    uint8_t      digest[EEP_SHA256_BYTES];
    char         hex[EEP_SHA256_HEX], chunk[1000];
    int          i;

    (void)state;
    memset(chunk, 'a', sizeof(chunk));
    eep_sha256_init(&ctx);
    for (i = 0; i < 1000; i++) {
        eep_sha256_update(&ctx, chunk, sizeof(chunk));
    }
    eep_sha256_final(&ctx, digest);
    eep_sha256_hex(digest, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Every length around the padding boundaries (55, 56, 63, 64, ...) and every split point agree. */
static void test_incremental_matches_one_shot(void **state)
{
    uint8_t      data[300], one[EEP_SHA256_BYTES], inc[EEP_SHA256_BYTES];
    eep_sha256_t ctx;
    size_t       len, split, i;

    (void)state;
    for (i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i * 131 + 7);
    }
    for (len = 0; len <= 200; len++) {
        eep_sha256(data, len, one);
        for (split = 0; split <= len; split += 13) {
            eep_sha256_init(&ctx);
            eep_sha256_update(&ctx, data, split);
            eep_sha256_update(&ctx, NULL, 0);
            eep_sha256_update(&ctx, data + split, len - split);
            eep_sha256_final(&ctx, inc);
            assert_memory_equal(one, inc, sizeof(one));
        }
        eep_sha256_init(&ctx); /* byte by byte */
        for (i = 0; i < len; i++) {
            eep_sha256_update(&ctx, data + i, 1);
        }
        eep_sha256_final(&ctx, inc);
        assert_memory_equal(one, inc, sizeof(one));
    }
    /* and one bit of input changes the digest */
    eep_sha256(data, 100, one);
    data[50] ^= 1;
    eep_sha256(data, 100, inc);
    assert_memory_not_equal(one, inc, sizeof(one));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_million_a),
        cmocka_unit_test(test_incremental_matches_one_shot),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
