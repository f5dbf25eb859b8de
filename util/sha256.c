/*
 * sha256.c - SHA-256 after FIPS 180-4, section 6.2.
 *
 * A plain, portable implementation: the JIT hashes a few hundred kilobytes of headers per cold
 * key, so a straightforward loop at a few hundred MB/s is enough and keeps the code auditable.
 */
#include "util/sha256.h"

#include <string.h>

static const uint32_t eep_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define EEP_ROTR(_x, _n) (((_x) >> (_n)) | ((_x) << (32 - (_n))))

static void eep_sha256_block(uint32_t state[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    int      i;

    for (i = 0; i < 16; i++) {
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | (uint32_t)p[4 * i + 3];
    }
    for (i = 16; i < 64; i++) {
        uint32_t s0 = EEP_ROTR(w[i - 15], 7) ^ EEP_ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = EEP_ROTR(w[i - 2], 17) ^ EEP_ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);

        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = state[0];
    b = state[1];
    c = state[2];
    d = state[3];
    e = state[4];
    f = state[5];
    g = state[6];
    h = state[7];
    for (i = 0; i < 64; i++) {
        t1 = h + (EEP_ROTR(e, 6) ^ EEP_ROTR(e, 11) ^ EEP_ROTR(e, 25)) + ((e & f) ^ (~e & g)) +
             eep_sha256_k[i] + w[i];
        t2 = (EEP_ROTR(a, 2) ^ EEP_ROTR(a, 13) ^ EEP_ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h  = g;
        g  = f;
        f  = e;
        e  = d + t1;
        d  = c;
        c  = b;
        b  = a;
        a  = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void eep_sha256_init(eep_sha256_t *ctx)
{
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };

    memcpy(ctx->state, iv, sizeof(iv));
    ctx->length    = 0;
    ctx->block_len = 0;
}

void eep_sha256_update(eep_sha256_t *ctx, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t         take;

    if (len == 0) {
        return; /* data may be NULL then, and memcpy must not see it */
    }
    ctx->length += len;
    if (ctx->block_len > 0) {
        take = 64 - ctx->block_len < len ? 64 - ctx->block_len : len;
        memcpy(ctx->block + ctx->block_len, p, take);
        ctx->block_len += take;
        p += take;
        len -= take;
        if (ctx->block_len < 64) {
            return;
        }
        eep_sha256_block(ctx->state, ctx->block);
        ctx->block_len = 0;
    }
    for (; len >= 64; p += 64, len -= 64) {
        eep_sha256_block(ctx->state, p);
    }
    if (len > 0) {
        memcpy(ctx->block, p, len);
        ctx->block_len = len;
    }
}

void eep_sha256_final(eep_sha256_t *ctx, uint8_t digest_p[EEP_SHA256_BYTES])
{
    uint64_t bits = ctx->length * 8;
    int      i;

    /* Padding: 0x80, zeros up to 56 mod 64, then the bit length big-endian. */
    ctx->block[ctx->block_len++] = 0x80;
    if (ctx->block_len > 56) {
        memset(ctx->block + ctx->block_len, 0, 64 - ctx->block_len);
        eep_sha256_block(ctx->state, ctx->block);
        ctx->block_len = 0;
    }
    memset(ctx->block + ctx->block_len, 0, 56 - ctx->block_len);
    for (i = 0; i < 8; i++) {
        ctx->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    }
    eep_sha256_block(ctx->state, ctx->block);
    for (i = 0; i < 8; i++) {
        digest_p[4 * i]     = (uint8_t)(ctx->state[i] >> 24);
        digest_p[4 * i + 1] = (uint8_t)(ctx->state[i] >> 16);
        digest_p[4 * i + 2] = (uint8_t)(ctx->state[i] >> 8);
        digest_p[4 * i + 3] = (uint8_t)ctx->state[i];
    }
}

void eep_sha256(const void *data, size_t len, uint8_t digest_p[EEP_SHA256_BYTES])
{
    eep_sha256_t ctx;

    eep_sha256_init(&ctx);
    eep_sha256_update(&ctx, data, len);
    eep_sha256_final(&ctx, digest_p);
}

void eep_sha256_hex(const uint8_t digest[EEP_SHA256_BYTES], char hex_p[EEP_SHA256_HEX])
{
    static const char digits[] = "0123456789abcdef";
    int               i;

    for (i = 0; i < EEP_SHA256_BYTES; i++) {
        hex_p[2 * i]     = digits[digest[i] >> 4];
        hex_p[2 * i + 1] = digits[digest[i] & 15];
    }
    hex_p[64] = '\0';
}
