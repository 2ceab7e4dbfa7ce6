/* CRC-32C (Castagnoli) in C, for the modules that checksum the log's frames
   (_ext/crc32c.pyx, _ext/offset_records.pyx).

   Two ways: the SSE4.2 CRC32 instruction, and a slicing-by-8 table for CPUs without it.
   The instruction's function is compiled for SSE4.2 through a target attribute, not
   -msse4.2, so the rest of a module stays baseline x86-64 and loads on any CPU;
   fastcoord_crc32c_init() asks the CPU once and fills the table, and
   fastcoord_crc32c_update() then takes the instruction only where the CPU has it. Off
   x86-64, or with a compiler without GCC's builtins, the check says no and the instruction
   is never used.

   Every function works on the CRC register: the caller applies the initial and final XOR
   (0xFFFFFFFF). Each module that includes this has its own table (8 KiB) and flag, filled
   by its own call to fastcoord_crc32c_init(). */
#ifndef FASTCOORD_CRC32C_H
#define FASTCOORD_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 1 where the instruction can be compiled in; -DFASTCOORD_CRC32C_X86=0 leaves it out. */
#ifndef FASTCOORD_CRC32C_X86
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FASTCOORD_CRC32C_X86 1
#else
#define FASTCOORD_CRC32C_X86 0
#endif
#endif

#if FASTCOORD_CRC32C_X86
#include <nmmintrin.h>
#endif

static int fastcoord_crc32c_have_sse42(void)
{
#if FASTCOORD_CRC32C_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
#else
    return 0;
#endif
}

#if FASTCOORD_CRC32C_X86
/* The register after n bytes at p: eight bytes per CRC32 instruction (memcpy is a plain
   unaligned load on x86), then the last 0 to 7 one byte at a time. */
__attribute__((target("sse4.2")))
static inline uint32_t fastcoord_crc32c_sse42(uint32_t state, const unsigned char *p, size_t n)
{
    uint64_t s = state;
    uint64_t word;
    while (n >= 8) {
        memcpy(&word, p, 8);
        s = _mm_crc32_u64(s, word);
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        s = _mm_crc32_u8((uint32_t)s, *p);
        p += 1;
        n -= 1;
    }
    return (uint32_t)s;
}
#else
static inline uint32_t fastcoord_crc32c_sse42(uint32_t state, const unsigned char *p, size_t n)
{
    (void)p;
    (void)n;
    return state; /* unreachable: fastcoord_crc32c_have_sse42() is 0 here */
}
#endif

#define FASTCOORD_CRC32C_POLYNOMIAL 0x82F63B78u /* Castagnoli's, bit-reflected */

/* fastcoord_crc32c_table[k][b]: the register after the byte b followed by k zero bytes, from
   a zero register. [0] is the textbook byte-at-a-time table; 1 to 7 let 8 bytes go in one
   step. */
static uint32_t fastcoord_crc32c_table[8][256];
static int fastcoord_crc32c_use_sse42 = 0;

static void fastcoord_crc32c_init(void)
{
    uint32_t c;
    int b, k, bit;
    for (b = 0; b < 256; b++) {
        c = (uint32_t)b;
        for (bit = 0; bit < 8; bit++)
            c = (c & 1) ? (c >> 1) ^ FASTCOORD_CRC32C_POLYNOMIAL : c >> 1;
        fastcoord_crc32c_table[0][b] = c;
    }
    for (k = 1; k < 8; k++) {
        for (b = 0; b < 256; b++) {
            c = fastcoord_crc32c_table[k - 1][b];
            fastcoord_crc32c_table[k][b] = (c >> 8) ^ fastcoord_crc32c_table[0][c & 0xFF];
        }
    }
    fastcoord_crc32c_use_sse42 = fastcoord_crc32c_have_sse42();
}

static inline uint32_t fastcoord_crc32c_load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
           | ((uint32_t)p[3] << 24);
}

/* The register after n bytes at p, slicing-by-8: the register is XORed into the next eight
   bytes, and each of them, k bytes from the end of the eight, adds table[k] of it. */
static inline uint32_t fastcoord_crc32c_table_update(uint32_t state, const unsigned char *p,
                                                     size_t n)
{
    const uint32_t (*t)[256] = fastcoord_crc32c_table;
    uint32_t lo, hi;
    while (n >= 8) {
        lo = state ^ fastcoord_crc32c_load_le32(p);
        hi = fastcoord_crc32c_load_le32(p + 4);
        state = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF]
                ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF]
                ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        state = t[0][(state ^ p[0]) & 0xFF] ^ (state >> 8);
        p += 1;
        n -= 1;
    }
    return state;
}

/* The register after n bytes at p, the fastest way this CPU has. */
static inline uint32_t fastcoord_crc32c_update(uint32_t state, const unsigned char *p, size_t n)
{
    if (fastcoord_crc32c_use_sse42)
        return fastcoord_crc32c_sse42(state, p, n);
    return fastcoord_crc32c_table_update(state, p, n);
}

#endif /* FASTCOORD_CRC32C_H */
