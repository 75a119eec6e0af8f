/* bench_reader.py's `libbpf (C)` reader: what a recorder written in C against libbpf does with a
 * BPF_MAP_TYPE_RINGBUF map. ring_buffer__consume() hands each record to a callback that copies it
 * into a 1 MiB buffer, written to OUT with write(2) whenever the next record would not fit, and
 * once more at the end.
 *
 *     ring_reader FD COUNT OUT
 *
 * FD: the ring map's file descriptor (inherited from the benchmark, which filled the ring before
 * starting this program); COUNT: the records the benchmark put there. The clock runs from the
 * first consume to the last write: the ring's mmap (ring_buffer__new) is set-up, outside it, as
 * the Python readers' is. On stdout, one line the benchmark parses:
 *
 *     ring_reader: N records B bytes T ns
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

static long long ns_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	struct ring_buffer *rb;
	unsigned long long want;
	long long start, took;
	char *end;
	int fd, n;

	if (argc != 4) {
		fprintf(stderr, "usage: ring_reader FD COUNT OUT\n");
		return 2;
	}
	fd = (int)strtol(argv[1], &end, 10);
	want = strtoull(argv[2], &end, 10);
	out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0) {
		fprintf(stderr, "ring_reader: %s: %s\n", argv[3], strerror(errno));
		return 1;
	}
	rb = ring_buffer__new(fd, on_record, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "ring_reader: ring_buffer__new(fd %d): %s\n", fd, strerror(errno));
		return 1;
	}
	start = ns_now();
	/* The ring was filled before this program started: a consume that finds nothing means
	 * nothing more will come, and the count says how many arrived. */
	while (records < want) {
		n = ring_buffer__consume(rb);
		if (n < 0) {
			fprintf(stderr, "ring_reader: ring_buffer__consume: %s\n", strerror(-n));
			return 1;
		}
		if (n == 0)
			break;
	}
	if (flush_buf()) {
		fprintf(stderr, "ring_reader: writing %s: %s\n", argv[3], strerror(errno));
		return 1;
	}
	took = ns_now() - start;
	ring_buffer__free(rb);
	close(out);
	printf("ring_reader: %llu records %llu bytes %lld ns\n", records, bytes, took);
	return 0;
}
