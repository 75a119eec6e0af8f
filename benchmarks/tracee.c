/* The program bench_tracers.py traces: `traced` (six integer arguments and a string, the
 * seventh argument, so on the stack on x86_64) called N times in a loop.
 *
 *     tracee N
 *
 * On stderr, one line the benchmark parses: the loop's own wall time (the tracers' start-up and
 * attach are outside it) and this process's CPU time, which the benchmark subtracts from its
 * children's to get the tracer's own. Built with gcc -O2 -g by the benchmark. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

/* noinline and noclone: one symbol, one call per iteration, for the uprobe to hit. */
__attribute__((noinline, noclone)) long traced(long a, long b, long c, long d, long e, long f,
					       const char *s)
{
	/* The compiler must keep the call: its result depends on every argument. */
	__asm__ volatile("" : : "r"(s) : "memory");
	return a + b + c + d + e + f + s[0];
}

static long long ns_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	static const char name[] = "bench";
	struct rusage self;
	long long start, took;
	long n, i, sum = 0;

	if (argc != 2 || (n = strtol(argv[1], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: tracee N (N > 0 calls)\n");
		return 2;
	}
	/* The string's page faulted in first: a probe cannot fault it in (bpftrace's str() of the
	 * first call would read nothing). */
	sum += *(volatile const char *)name;
	start = ns_now();
	for (i = 0; i < n; i++)
		sum += traced(i, -i, -7, 4000000000L, 1L << 40, i * 3, name);
	took = ns_now() - start;
	getrusage(RUSAGE_SELF, &self);
	fprintf(stderr, "tracee: %ld calls %lld ns cpu %ld us sum %ld\n", n, took,
		(long)(self.ru_utime.tv_sec + self.ru_stime.tv_sec) * 1000000L +
			self.ru_utime.tv_usec + self.ru_stime.tv_usec,
		sum);
	return 0;
}
