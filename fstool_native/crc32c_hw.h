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

static int fstool_crc32c_hw_available(void)
{
    return 0;
}

#endif
#endif
