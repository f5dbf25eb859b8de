/*
 * sha256.h - SHA-256 (FIPS 180-4), small and self-contained, for JIT cache keys and checksums.
 *
 * Not for secrets: no constant-time guarantees are needed or made.
 */
#ifndef EEP_SHA256_H
#define EEP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EEP_SHA256_BYTES 32
#define EEP_SHA256_HEX   65 /* 64 hex digits and the terminating NUL */

typedef struct {
    uint32_t state[8];
    uint64_t length;    /* bytes hashed so far */
    uint8_t  block[64]; /* pending input, block_len bytes */
    size_t   block_len;
} eep_sha256_t;

/** Start a hash. */
void eep_sha256_init(eep_sha256_t *ctx);

/** Add @p len bytes of @p data (data may be NULL when len is 0). */
void eep_sha256_update(eep_sha256_t *ctx, const void *data, size_t len);

/** Finish; @p digest_p gets the 32-byte digest.  The context must be re-initialised to reuse. */
void eep_sha256_final(eep_sha256_t *ctx, uint8_t digest_p[EEP_SHA256_BYTES]);

/** One-shot digest of a buffer. */
void eep_sha256(const void *data, size_t len, uint8_t digest_p[EEP_SHA256_BYTES]);

/** Lower-case hex of a digest into @p hex_p (65 bytes, NUL terminated). */
void eep_sha256_hex(const uint8_t digest[EEP_SHA256_BYTES], char hex_p[EEP_SHA256_HEX]);

#ifdef __cplusplus
}
#endif

#endif /* EEP_SHA256_H */
