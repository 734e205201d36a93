/* seqread: per-request latency of 4 KiB O_DIRECT reads, the same way on a host and in a guest.
 *
 * The 2010 benchmark behind the virtio-blk latency chapter timed a loop of read() calls and
 * printed only the mean. This one times every single pread() with the time stamp counter, so that
 * a request can be matched with trace events of every layer underneath it (which use the TSC too:
 * ftrace's x86-tsc clock), and so that the whole distribution is kept.
 *
 *   seqread read -f PATH [-n COUNT] [-w WARMUP] [-b BYTES] [-m seq|rand] [-s SPAN] [-p START]
 *                [-S SEED] [-o OUT] [-t TAG]
 *       opens PATH with O_RDONLY|O_DIRECT and reads COUNT+WARMUP blocks of BYTES (default 4096)
 *       from the region [START, SPAN) (SPAN 0: the file's size).  seq: offsets START, START+BYTES,
 *       ... wrapping back to START at SPAN; rand: uniform BYTES-aligned offsets in the region from
 *       a xorshift64* generator seeded with SEED. The first WARMUP requests are
 *       timed as well but flagged; nothing is written while the loop runs (the rows are kept in
 *       memory and printed afterwards, to OUT or stdout):
 *         r,TAG,IDX,WARM,OFFSET,TSC_BEFORE,TSC_AFTER
 *         loop,TAG,TSC_START,TSC_END,MONO_START_NS,MONO_END_NS,N
 *       TSC_BEFORE is LFENCE;RDTSC right before pread(), TSC_AFTER is LFENCE;RDTSC;LFENCE right
 *       after (no RDTSCP: QEMU's default TCG CPU model lacks it).
 *
 *   seqread calib [-n N]
 *       N samples of  c,TSC_BEFORE,TSC_AFTER,REALTIME_NS,MONOTONIC_RAW_NS  (the two clock reads
 *       between the two TSC reads), for mapping CLOCK_REALTIME stamps (QEMU's log) and
 *       nanoseconds onto the TSC axis.
 *
 * Exit status: 0 ok, 2 usage, 3 I/O error (a message on stderr says which request).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t tsc_begin(void)
{
	uint32_t lo, hi;
	__asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
	return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t tsc_end(void)
{
	uint32_t lo, hi;
	__asm__ __volatile__("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi)::"memory");
	return ((uint64_t)hi << 32) | lo;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
	fprintf(stderr, "usage: seqread read -f PATH [-n COUNT] [-w WARMUP] [-b BYTES] [-m seq|rand] "
			"[-s SPAN] [-p START] [-S SEED] [-o OUT] [-t TAG]\n"
			"       seqread calib [-n N]\n");
	exit(2);
}

static long long num(const char *s, const char *what)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (errno || *end || v < 0) {
		fprintf(stderr, "seqread: %s must be a non-negative integer, got '%s'\n", what, s);
		exit(2);
	}
	return v;
}

static uint64_t xorshift64s(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

struct row {
	uint64_t off, t0, t1;
};

static int cmd_read(int argc, char **argv)
{
	const char *path = NULL, *out = NULL, *tag = "run", *mode = "seq";
	long long count = 1000, warm = 10, bs = 4096, span = 0, start = 0, seed = 1;
	int c;
	while ((c = getopt(argc, argv, "f:n:w:b:m:s:p:S:o:t:")) != -1) {
		switch (c) {
		case 'f': path = optarg; break;
		case 'n': count = num(optarg, "-n"); break;
		case 'w': warm = num(optarg, "-w"); break;
		case 'b': bs = num(optarg, "-b"); break;
		case 'm': mode = optarg; break;
		case 's': span = num(optarg, "-s"); break;
		case 'p': start = num(optarg, "-p"); break;
		case 'S': seed = num(optarg, "-S"); break;
		case 'o': out = optarg; break;
		case 't': tag = optarg; break;
		default: usage();
		}
	}
	int rnd = strcmp(mode, "rand") == 0;
	if (!path || (!rnd && strcmp(mode, "seq")) || count < 1 || bs < 512 || bs % 512)
		usage();
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "seqread: open %s with O_DIRECT: %s\n", path, strerror(errno));
		return 3;
	}
	if (span == 0) {
		off_t end = lseek(fd, 0, SEEK_END);
		if (end < 0) {
			fprintf(stderr, "seqread: size of %s: %s\n", path, strerror(errno));
			return 3;
		}
		span = end;
	}
	span -= span % bs;
	if (span < start + bs || start % bs) {
		fprintf(stderr, "seqread: region [%lld, %lld) holds no %lld-byte block, or its start is not aligned\n",
			start, span, bs);
		return 2;
	}
	void *buf;
	if (posix_memalign(&buf, 4096, (size_t)bs)) {
		fprintf(stderr, "seqread: no memory for the buffer\n");
		return 3;
	}
	long long n = count + warm;
	struct row *rows = calloc((size_t)n, sizeof *rows);
	if (!rows) {
		fprintf(stderr, "seqread: no memory for %lld rows\n", n);
		return 3;
	}
	uint64_t state = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
	uint64_t blocks = (uint64_t)((span - start) / bs);
	uint64_t next = 0;
	for (long long i = 0; i < n; i++) {
		if (rnd) {
			rows[i].off = (uint64_t)start + (xorshift64s(&state) % blocks) * (uint64_t)bs;
		} else {
			rows[i].off = (uint64_t)start + next * (uint64_t)bs;
			next = (next + 1) % blocks;
		}
	}
	uint64_t mono0 = clock_ns(CLOCK_MONOTONIC);
	uint64_t loop0 = tsc_begin();
	for (long long i = 0; i < n; i++) {
		uint64_t t0 = tsc_begin();
		ssize_t r = pread(fd, buf, (size_t)bs, (off_t)rows[i].off);
		uint64_t t1 = tsc_end();
		if (r != bs) {
			fprintf(stderr, "seqread: request %lld (offset %" PRIu64 ") returned %zd: %s\n", i,
				rows[i].off, r, r < 0 ? strerror(errno) : "short read");
			return 3;
		}
		rows[i].t0 = t0;
		rows[i].t1 = t1;
	}
	uint64_t loop1 = tsc_end();
	uint64_t mono1 = clock_ns(CLOCK_MONOTONIC);
	close(fd);
	FILE *f = out ? fopen(out, "w") : stdout;
	if (!f) {
		fprintf(stderr, "seqread: open %s: %s\n", out, strerror(errno));
		return 3;
	}
	for (long long i = 0; i < n; i++)
		fprintf(f, "r,%s,%lld,%d,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", tag, i - warm, i < warm,
			rows[i].off, rows[i].t0, rows[i].t1);
	fprintf(f, "loop,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%lld\n", tag, loop0, loop1,
		mono0, mono1, n);
	if (fclose(f)) {
		fprintf(stderr, "seqread: write %s: %s\n", out ? out : "stdout", strerror(errno));
		return 3;
	}
	free(rows);
	free(buf);
	return 0;
}

static int cmd_calib(int argc, char **argv)
{
	long long n = 200;
	int c;
	while ((c = getopt(argc, argv, "n:")) != -1) {
		if (c == 'n')
			n = num(optarg, "-n");
		else
			usage();
	}
	for (long long i = 0; i < n; i++) {
		uint64_t t0 = tsc_begin();
		uint64_t real = clock_ns(CLOCK_REALTIME);
		uint64_t raw = clock_ns(CLOCK_MONOTONIC_RAW);
		uint64_t t1 = tsc_end();
		printf("c,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", t0, t1, real, raw);
	}
	return fflush(stdout) ? 3 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "read") == 0)
		return cmd_read(argc - 1, argv + 1);
	if (strcmp(argv[1], "calib") == 0)
		return cmd_calib(argc - 1, argv + 1);
	usage();
	return 2;
}
