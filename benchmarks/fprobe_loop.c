/* The user-space side of bench_fprobe.py: a system call that reaches a kernel function, N
 * times, timed with clock_gettime (CLOCK_MONOTONIC) around the loop alone.
 *
 *     fprobe_loop sendto|mmap N [OUT]   -> "ns_per_call X" on stdout, or in the file OUT
 *
 * The loop of N calls runs REPS times, and X is the least of its times a call: other work on
 * the machine (a guest under TCG on a shared host) only ever adds time.
 *
 * sendto(-1, ...) reaches __sys_sendto (six register arguments), which fails at once on the
 * descriptor (EBADF); an anonymous mmap of length 0 reaches do_mmap (nine arguments: three on
 * the stack on x86_64) through vm_mmap_pgoff, which refuses the length (EINVAL). Each call's
 * error is checked: a loop that did not reach the function would time something else. Built
 * static by the benchmark (the guest has no C library of its own). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

static long long ns_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

#define REPS 3

static char buf[64];

/* The loop's time, in ns; -1 where a call did not fail as it should. */
static long long timed(int mmap_call, long n)
{
	long long start = ns_now();
	long i;

	for (i = 0; i < n; i++) {
		if (mmap_call) {
			if (mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED ||
			    errno != EINVAL)
				return -1;
		} else {
			if (sendto(-1, buf, sizeof(buf), 0, NULL, 0) != -1 || errno != EBADF)
				return -1;
		}
	}
	return ns_now() - start;
}

int main(int argc, char **argv)
{
	long long took, best = -1;
	FILE *out = stdout;
	int mmap_call, rep;
	long n;

	if ((argc != 3 && argc != 4) || (n = strtol(argv[2], NULL, 10)) <= 0 ||
	    (strcmp(argv[1], "sendto") && strcmp(argv[1], "mmap"))) {
		fprintf(stderr, "usage: fprobe_loop sendto|mmap N [OUT]\n");
		return 2;
	}
	mmap_call = !strcmp(argv[1], "mmap");
	for (rep = 0; rep < REPS; rep++) {
		took = timed(mmap_call, n);
		if (took < 0) {
			fprintf(stderr, "fprobe_loop: %s did not fail as expected: %s\n", argv[1],
				strerror(errno));
			return 1;
		}
		if (best < 0 || took < best)
			best = took;
	}
	if (argc == 4 && !(out = fopen(argv[3], "w"))) {
		perror(argv[3]);
		return 1;
	}
	fprintf(out, "ns_per_call %.1f reps %d\n", (double)best / n, REPS);
	return fclose(out) ? 1 : 0;
}
