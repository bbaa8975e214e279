/* CRC-32C by the CPU's own instruction where there is one (SSE 4.2 on
 * x86-64), for parsers.py's compiled form.  Both functions work on the
 * pre-inverted CRC register, like _crc_update.  Elsewhere, or on a CPU
 * without the instruction, fstool_crc32c_hw_available() is 0 and the
 * table-driven loop in parsers.py is used. */
#ifndef FSTOOL_CRC32C_HW_H
#define FSTOOL_CRC32C_HW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static unsigned int fstool_crc32c_hw(unsigned int crc, const unsigned char *p, size_t n)
{
    uint64_t c = crc;
    uint64_t word;
    while (n >= 8) {
        memcpy(&word, p, 8);            /* little-endian, any alignment */
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((unsigned int)c, *p++);
    return (unsigned int)c;
}

/* The XFS checksums (the final, inverted CRC) of three regions of n bytes
 * at once, each with its 4-byte checksum field at off taken as zero: three
 * independent chains keep the CPU's CRC unit busy where one chain waits on
 * each step's result. */
__attribute__((target("sse4.2")))
static void fstool_cksum3_hw(const unsigned char *p0, const unsigned char *p1,
                             const unsigned char *p2, size_t n, size_t off,
                             unsigned int *out)
{
    uint64_t a = 0xFFFFFFFFu, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
    uint64_t w0, w1, w2;
    size_t i = 0;
    for (; i + 8 <= off; i += 8) {
        memcpy(&w0, p0 + i, 8);
        memcpy(&w1, p1 + i, 8);
        memcpy(&w2, p2 + i, 8);
        a = _mm_crc32_u64(a, w0);
        b = _mm_crc32_u64(b, w1);
        c = _mm_crc32_u64(c, w2);
    }
    for (; i < off; i++) {
        a = _mm_crc32_u8((unsigned int)a, p0[i]);
        b = _mm_crc32_u8((unsigned int)b, p1[i]);
        c = _mm_crc32_u8((unsigned int)c, p2[i]);
    }
    /* four zero bytes stand in for the field */
    a = _mm_crc32_u32((unsigned int)a, 0);
    b = _mm_crc32_u32((unsigned int)b, 0);
    c = _mm_crc32_u32((unsigned int)c, 0);
    for (i = off + 4; i + 8 <= n; i += 8) {
        memcpy(&w0, p0 + i, 8);
        memcpy(&w1, p1 + i, 8);
        memcpy(&w2, p2 + i, 8);
        a = _mm_crc32_u64(a, w0);
        b = _mm_crc32_u64(b, w1);
        c = _mm_crc32_u64(c, w2);
    }
    for (; i < n; i++) {
        a = _mm_crc32_u8((unsigned int)a, p0[i]);
        b = _mm_crc32_u8((unsigned int)b, p1[i]);
        c = _mm_crc32_u8((unsigned int)c, p2[i]);
    }
    out[0] = ~(unsigned int)a;
    out[1] = ~(unsigned int)b;
    out[2] = ~(unsigned int)c;
}

static int fstool_crc32c_hw_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

#else

static unsigned int fstool_crc32c_hw(unsigned int crc, const unsigned char *p, size_t n)
{
    (void)p;
    (void)n;
    return crc;
}

static void fstool_cksum3_hw(const unsigned char *p0, const unsigned char *p1,
                             const unsigned char *p2, size_t n, size_t off,
                             unsigned int *out)
{
    (void)p0;
    (void)p1;
    (void)p2;
    (void)n;
    (void)off;
    out[0] = out[1] = out[2] = 0;
}

static int fstool_crc32c_hw_available(void)
{
    return 0;
}

#endif
#endif
