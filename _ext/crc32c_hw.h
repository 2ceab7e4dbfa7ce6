/* CRC-32C with the SSE4.2 CRC32 instruction, for _ext/crc32c.pyx.

   The function is compiled for SSE4.2 through a target attribute, not -msse4.2, so the rest
   of the module stays baseline x86-64 and loads on any CPU; crc32c.pyx calls it only when
   fastcoord_crc32c_have_sse42() says the CPU has the instruction, and uses its slicing-by-8
   table otherwise. Off x86-64, or with a compiler without GCC's builtins, the check says no
   and the function is never called.

   Both work on the CRC register: the caller applies the initial and final XOR. */
#ifndef FASTCOORD_CRC32C_HW_H
#define FASTCOORD_CRC32C_HW_H

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

#endif /* FASTCOORD_CRC32C_HW_H */
