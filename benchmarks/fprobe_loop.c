/* The user-space side of bench_fprobe.py: a system call that reaches a kernel function, N
 * times, timed with clock_gettime (CLOCK_MONOTONIC) around the loop alone.
 *
 *     fprobe_loop sendto|mmap N [OUT]   -> "ns_per_call X" on stdout, or in the file OUT
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

int main(int argc, char **argv)
{
	static char buf[64];
	long n, i;
	int mmap_call;
	long long start, took;

	FILE *out = stdout;

	if ((argc != 3 && argc != 4) || (n = strtol(argv[2], NULL, 10)) <= 0 ||
	    (strcmp(argv[1], "sendto") && strcmp(argv[1], "mmap"))) {
		fprintf(stderr, "usage: fprobe_loop sendto|mmap N [OUT]\n");
		return 2;
	}
	mmap_call = !strcmp(argv[1], "mmap");
	start = ns_now();
	for (i = 0; i < n; i++) {
		if (mmap_call) {
			if (mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED ||
			    errno != EINVAL)
				goto unexpected;
		} else {
			if (sendto(-1, buf, sizeof(buf), 0, NULL, 0) != -1 || errno != EBADF)
				goto unexpected;
		}
	}
	took = ns_now() - start;
	if (argc == 4 && !(out = fopen(argv[3], "w"))) {
		perror(argv[3]);
		return 1;
	}
	fprintf(out, "ns_per_call %.1f\n", (double)took / n);
	return fclose(out) ? 1 : 0;
unexpected:
	fprintf(stderr, "fprobe_loop: %s did not fail as expected: %s\n", argv[1], strerror(errno));
	return 1;
}
