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
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef uint32_t (*io_crc_fn)(uint32_t crc, unsigned char const *p, size_t len);

#if defined(__x86_64__)
#include <immintrin.h>

/*
 * One crc32 instruction waits for the last (three cycles for eight bytes)
 * while the CPU could start two more: so a long buffer is summed as three
 * lanes at once, and the lanes' sums are joined.  Joining moves a lane's
 * sum past the n bytes that follow it, a product with x^(8n) mod P, which
 * one carry-less multiply and one crc32 make.  Two lane lengths: 1 KiB for
 * blocks, 128 bytes for what is left of them.
 */
enum { IO_LANE_BIG = 1024, IO_LANE_SMALL = 128 };

/* For a lane of n bytes: the factors that move a sum past n and 2n bytes. */
struct io_lane {
	size_t n;
	uint64_t past1, past2;
};

static struct io_lane io_lanes[2];

/*
 * x^e mod P in the reflected form the sums use (bit 31 is x^0), less the
 * x^33 the multiply and the crc32 that reduces it add.
 */
static uint64_t io_xpow(size_t e)
{
	uint32_t r = 0x80000000u;

	for (e -= 33; e; e--)
		r = r & 1 ? (r >> 1) ^ 0x82f63b78u : r >> 1;
	return r;
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t io_crc_past(uint32_t crc, uint64_t factor)
{
	__m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)crc), _mm_cvtsi64_si128((long long)factor), 0);

	return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(prod));
}

static uint64_t io_load8(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	return w;
}

__attribute__((target("sse4.2,pclmul"))) static uint64_t io_crc_lanes(uint64_t c, unsigned char const **pp,
								      size_t *len, const struct io_lane *l)
{
	const unsigned char *p = *pp;
	size_t n = l->n;

	for (; *len >= 3 * n; *len -= 3 * n, p += 3 * n) {
		uint64_t a = c, b = 0, d = 0;

		for (size_t i = 0; i < n; i += 8) {
			a = _mm_crc32_u64(a, io_load8(p + i));
			b = _mm_crc32_u64(b, io_load8(p + n + i));
			d = _mm_crc32_u64(d, io_load8(p + 2 * n + i));
		}
		c = io_crc_past((uint32_t)a, l->past2) ^ io_crc_past((uint32_t)b, l->past1) ^ (uint32_t)d;
	}
	*pp = p;
	return c;
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t io_crc32c_hw(uint32_t crc, unsigned char const *p,
								      size_t len)
{
	uint64_t c = crc;

	for (; len && ((uintptr_t)p & 7); len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	c = io_crc_lanes(c, &p, &len, &io_lanes[0]);
	c = io_crc_lanes(c, &p, &len, &io_lanes[1]);
	for (; len >= 8; len -= 8, p += 8)
		c = _mm_crc32_u64(c, io_load8(p));
	for (; len; len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return (uint32_t)c;
}

static io_crc_fn io_crc32c_cpu(void)
{
	static const size_t n[2] = { IO_LANE_BIG, IO_LANE_SMALL };

	if (!__builtin_cpu_supports("sse4.2") || !__builtin_cpu_supports("pclmul"))
		return NULL;
	for (int i = 0; i < 2; i++)
		io_lanes[i] = (struct io_lane){ n[i], io_xpow(8 * n[i]), io_xpow(16 * n[i]) };
	return io_crc32c_hw;
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

static _Atomic io_crc_fn io_crc32c_fn;
static pthread_once_t io_crc32c_once = PTHREAD_ONCE_INIT;

/* The sum this process uses: the instruction's, or the library's own (the next definition). */
static void io_crc32c_pick(void)
{
	io_crc_fn f = io_crc32c_cpu();

	if (!f)
		*(void **)&f = dlsym(RTLD_NEXT, "ext2fs_crc32c_le");
	/* Release: the lanes' factors are set before a thread that sees the function uses them. */
	atomic_store_explicit(&io_crc32c_fn, f ? f : io_crc32c_bits, memory_order_release);
}

uint32_t ext2fs_crc32c_le(uint32_t crc, unsigned char const *p, size_t len)
{
	io_crc_fn f = atomic_load_explicit(&io_crc32c_fn, memory_order_acquire);

	if (!f) {
		pthread_once(&io_crc32c_once, io_crc32c_pick);
		f = atomic_load_explicit(&io_crc32c_fn, memory_order_acquire);
	}
	return f(crc, p, len);
}
