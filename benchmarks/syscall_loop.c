/* The program bench_errno.py runs: a loop of one cheap system call (getppid), timed, in a
 * process not traced or in the traced one after its traced function has run once.
 *
 *     syscall_loop N RESULT                 the loop, at once
 *     syscall_loop N RESULT READY GO        creates READY, waits for GO to exist, calls mark()
 *                                           (the traced function), then the loop
 *
 * Writes "N ns" (the loop's wall time) to RESULT. Once mark() has been entered, its thread has
 * a slot in trace.bpf.c's syscall_error map, so every later system call's exit writes its error
 * there: what a traced process's system calls cost. Built with gcc -O2 by the benchmark. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline, noclone)) int mark(int x)
{
	__asm__ volatile("" : : "r"(x) : "memory");
	return x;
}

static long long ns_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	struct timespec ms = {0, 1000000};
	long long start, took;
	long n, i;
	FILE *out;

	if ((argc != 3 && argc != 5) || (n = strtol(argv[1], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: syscall_loop N RESULT [READY GO]\n");
		return 2;
	}
	if (argc == 5) {
		close(open(argv[3], O_WRONLY | O_CREAT, 0644));
		while (access(argv[4], F_OK))
			nanosleep(&ms, NULL);
		mark(1);
	}
	start = ns_now();
	for (i = 0; i < n; i++)
		syscall(SYS_getppid); /* not libc's getppid(): never cached, one system call each */
	took = ns_now() - start;
	out = fopen(argv[2], "w");
	if (!out)
		return 1;
	fprintf(out, "%ld %lld\n", n, took);
	return fclose(out) ? 1 : 0;
}
