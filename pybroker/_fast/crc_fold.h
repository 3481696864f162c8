/* CRC-32 (zlib's polynomial, Java's java.util.zip.CRC32) by folding with carry-less
 * multiplication (PCLMULQDQ) on x86-64, zlib's own crc32 elsewhere and for short spans.
 *
 * Why: the record body's CRC is computed on every send and checked on every read of a record;
 * zlib 1.2.13's table loop costs about a cycle a byte, folding about a tenth of that (the
 * figures are in docs/architecture/send-fast-path.md). Java's CRC32 is an intrinsic that folds
 * the same way.
 *
 * How: a message M of 16-byte blocks read little-endian is, in the bit-reflected domain CRC-32
 * uses, the sum of block(i) * x^(8 * bytes after it); multiplying a block by x^n mod P moves it n
 * bits on, so four running 128-bit blocks are carried 64 bytes forward at a time, then folded
 * into one 16 bytes at a time. Each 64-bit half h of a block is multiplied by its constant
 * (x^n mod P for the distance that half travels, bit-reflected and shifted one bit left: the
 * shift the reflected carry-less product needs); the sum is at most 96 bits wide and is added to
 * the block at the destination. The last 16-byte block and the tail (< 16 bytes) are then a
 * short message whose zlib CRC from the all-ones state is the result. The caller's CRC enters
 * as zlib's does: its complement is added to the first four bytes.
 * tests/unit/_fast/test_crc.py derives the four constants from the polynomial and checks
 * them against this file, and checks the results against zlib over every length and offset.
 */
#ifndef PB_CRC_FOLD_H
#define PB_CRC_FOLD_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

/* Below this many bytes zlib's table loop is used (the fold needs four blocks to start). */
#define PB_CRC_FOLD_MIN_BYTES 64
/* zlib takes an unsigned int length: longer spans go to it in pieces of at most 1 GiB. */
#define PB_CRC_ZLIB_CHUNK_BYTES ((size_t)1 << 30)

/* x^n mod P, reflected, << 1: carrying a block's low / high half 64 bytes (n = 544 / 480)
 * or 16 bytes (n = 160 / 96) forward. */
#define PB_CRC_K544 0x154442bd4ULL
#define PB_CRC_K480 0x1c6e41596ULL
#define PB_CRC_K160 0x1751997d0ULL
#define PB_CRC_K96 0x0ccaa009eULL

static inline uint32_t pb_crc32_zlib(uint32_t crc, const unsigned char *data, size_t length)
{
    uLong value = crc;
    while (length > PB_CRC_ZLIB_CHUNK_BYTES) {
        value = crc32(value, data, (uInt)PB_CRC_ZLIB_CHUNK_BYTES);
        data += PB_CRC_ZLIB_CHUNK_BYTES;
        length -= PB_CRC_ZLIB_CHUNK_BYTES;
    }
    return (uint32_t)crc32(value, data, (uInt)length);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("pclmul,sse2")))
static inline __m128i pb_crc_carry(__m128i block, __m128i constants, __m128i next)
{
    /* low half * constants' low qword + high half * constants' high qword, added to next */
    __m128i low = _mm_clmulepi64_si128(block, constants, 0x00);
    __m128i high = _mm_clmulepi64_si128(block, constants, 0x11);
    return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

/* length >= PB_CRC_FOLD_MIN_BYTES */
__attribute__((target("pclmul,sse2")))
static inline uint32_t pb_crc32_fold(uint32_t crc, const unsigned char *data, size_t length)
{
    const __m128i by64 = _mm_set_epi64x((long long)PB_CRC_K480, (long long)PB_CRC_K544);
    const __m128i by16 = _mm_set_epi64x((long long)PB_CRC_K96, (long long)PB_CRC_K160);
    __m128i x0 = _mm_loadu_si128((const __m128i *)data);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(data + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(data + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(data + 48));
    unsigned char last[16];
    uint32_t value;
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)~crc));
    data += 64;
    length -= 64;
    while (length >= 64) {
        x0 = pb_crc_carry(x0, by64, _mm_loadu_si128((const __m128i *)data));
        x1 = pb_crc_carry(x1, by64, _mm_loadu_si128((const __m128i *)(data + 16)));
        x2 = pb_crc_carry(x2, by64, _mm_loadu_si128((const __m128i *)(data + 32)));
        x3 = pb_crc_carry(x3, by64, _mm_loadu_si128((const __m128i *)(data + 48)));
        data += 64;
        length -= 64;
    }
    x0 = pb_crc_carry(x0, by16, x1);
    x0 = pb_crc_carry(x0, by16, x2);
    x0 = pb_crc_carry(x0, by16, x3);
    while (length >= 16) {
        x0 = pb_crc_carry(x0, by16, _mm_loadu_si128((const __m128i *)data));
        data += 16;
        length -= 16;
    }
    _mm_storeu_si128((__m128i *)last, x0);
    value = (uint32_t)crc32(0xFFFFFFFFUL, last, 16);
    return (uint32_t)crc32(value, data, (uInt)length);
}

static inline int pb_crc_fold_usable(void)
{
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}
#else
static inline uint32_t pb_crc32_fold(uint32_t crc, const unsigned char *data, size_t length)
{
    return pb_crc32_zlib(crc, data, length);
}

static inline int pb_crc_fold_usable(void)
{
    return 0;
}
#endif

/* zlib's crc32(crc, data, length) for any length. */
static inline uint32_t pb_crc32_update(uint32_t crc, const unsigned char *data, size_t length)
{
    if (length >= PB_CRC_FOLD_MIN_BYTES && pb_crc_fold_usable())
        return pb_crc32_fold(crc, data, length);
    return pb_crc32_zlib(crc, data, length);
}

#endif
