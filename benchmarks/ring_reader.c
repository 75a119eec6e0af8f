/* bench_reader.py's `libbpf (C)` reader: what a recorder written in C against libbpf does with a
 * BPF_MAP_TYPE_RINGBUF map. ring_buffer__consume() hands each record to a callback that copies it
 * into a 1 MiB buffer, written to OUT with write(2) whenever the next record would not fit, and
 * once more at the end.
 *
 *     ring_reader FD OUT
 *
 * FD: the ring map's file descriptor (inherited from the benchmark). The benchmark fills the
 * ring, then writes a line to stdin (the records it put there); this program drains the ring to
 * the end and answers on stdout, one line a round, until stdin ends:
 *
 *     ring_reader: N records B bytes T ns C cpu ns
 *
 * The clocks (the time, and this thread's CPU time, user and system) run from the first consume
 * to the last write. OUT is emptied before each round, on
 * no one's clock. One process, one mapping of the ring for every round, as a recorder running
 * for a while has: the benchmark's first round, which faults the mapping's pages in, is not
 * counted (the Python readers' neither).
 *
 * Built by the benchmark with cc -O2 and -lbpf (Debian's libbpf-dev). */
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 20];
static size_t used;
static int out = -1;
static unsigned long long records, bytes;

static int write_all(const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(out, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int flush_buf(void)
{
	int err = write_all(buf, used);

	used = 0;
	return err;
}

static int on_record(void *ctx, void *data, size_t size)
{
	(void)ctx;
	records++;
	bytes += size;
	if (used + size > sizeof(buf) && flush_buf())
		return -EIO; /* ends the consume: the count then says what was kept */
	if (size > sizeof(buf))
		return write_all(data, size) ? -EIO : 0;
	memcpy(buf + used, data, size);
	used += size;
	return 0;
}

static long long ns_now(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	unsigned long long want;
	struct ring_buffer *rb;
	long long start, took, cpu_start, cpu;
	char line[64];
	int fd, n;

	if (argc != 3) {
		fprintf(stderr, "usage: ring_reader FD OUT\n");
		return 2;
	}
	fd = (int)strtol(argv[1], NULL, 10);
	out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0) {
		fprintf(stderr, "ring_reader: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	rb = ring_buffer__new(fd, on_record, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "ring_reader: ring_buffer__new(fd %d): %s\n", fd, strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), stdin)) {
		want = strtoull(line, NULL, 10);
		records = bytes = 0;
		/* A file is emptied (a character device such as /dev/null has nothing to empty). */
		if (ftruncate(out, 0) == 0)
			lseek(out, 0, SEEK_SET);
		cpu_start = ns_now(CLOCK_THREAD_CPUTIME_ID);
		start = ns_now(CLOCK_MONOTONIC);
		/* The ring was filled before the line came: a consume that finds nothing means
		 * nothing more will come, and the count says how many arrived. */
		do {
			n = ring_buffer__consume(rb);
			if (n < 0) {
				fprintf(stderr, "ring_reader: ring_buffer__consume: %s\n", strerror(-n));
				return 1;
			}
		} while (n > 0);
		if (flush_buf()) {
			fprintf(stderr, "ring_reader: writing %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		took = ns_now(CLOCK_MONOTONIC) - start;
		cpu = ns_now(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
		printf("ring_reader: %llu records %llu bytes %lld ns %lld cpu ns (of %llu)\n",
		       records, bytes, took, cpu, want);
		fflush(stdout);
	}
	ring_buffer__free(rb);
	close(out);
	return 0;
}
