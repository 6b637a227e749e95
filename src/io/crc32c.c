// SPDX-License-Identifier: GPL-2.0
/*
 * libext2fs's crc32c, ext2fs_crc32c_le, with the CPU's crc32 instruction.
 *
 * Under metadata_csum libext2fs sums every directory block, inode, bitmap
 * and extent block it reads or writes, and the journal every block it logs.
 * Its sum is table-driven: about 4 us for a 4 KiB block here, where a
 * small-file create reads a directory block three times and writes it once
 * (a quarter of rrfuse's time in rrbench W5).  SSE4.2's crc32 computes the
 * same sum (Castagnoli's polynomial, reflected, no inversion in or out:
 * the callers pass the seed and keep the result as it is) eight bytes at a
 * time, about eight times faster.
 *
 * This definition takes the library's place for every caller, libext2fs's
 * own included: they call it through the library's PLT.  Without the
 * instruction it calls the library's.
 */
#include <dlfcn.h>
#include <ext2fs/ext2fs.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef uint32_t (*io_crc_fn)(uint32_t crc, unsigned char const *p, size_t len);

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t io_crc32c_hw(uint32_t crc, unsigned char const *p,
							      size_t len)
{
	uint64_t c = crc;

	for (; len && ((uintptr_t)p & 7); len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	for (; len >= 8; len -= 8, p += 8) {
		uint64_t w;

		memcpy(&w, p, sizeof(w));
		c = _mm_crc32_u64(c, w);
	}
	for (; len; len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return (uint32_t)c;
}

static io_crc_fn io_crc32c_cpu(void)
{
	return __builtin_cpu_supports("sse4.2") ? io_crc32c_hw : NULL;
}
#else
static io_crc_fn io_crc32c_cpu(void)
{
	return NULL;
}
#endif

/* Bit by bit: only where neither the instruction nor the library's is to be had. */
static uint32_t io_crc32c_bits(uint32_t crc, unsigned char const *p, size_t len)
{
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc >> 1 ^ (0x82f63b78u & -(crc & 1));
	}
	return crc;
}

/* The sum this process uses: the instruction's, or the library's own (the next definition). */
static io_crc_fn io_crc32c_pick(void)
{
	io_crc_fn f = io_crc32c_cpu();

	if (!f)
		*(void **)&f = dlsym(RTLD_NEXT, "ext2fs_crc32c_le");
	return f ? f : io_crc32c_bits;
}

uint32_t ext2fs_crc32c_le(uint32_t crc, unsigned char const *p, size_t len)
{
	static _Atomic io_crc_fn fn;
	io_crc_fn f = atomic_load_explicit(&fn, memory_order_relaxed);

	if (!f) {
		f = io_crc32c_pick();
		atomic_store_explicit(&fn, f, memory_order_relaxed);
	}
	return f(crc, p, len);
}
