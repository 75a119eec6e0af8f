/* A known user call chain into the kernel, for `btfgen trace --kernel --stack kernel,user`
 * (tests/live_kernel/test_trace_stack.py): main -> a -> b -> lseek, CALLS times, on the file
 * argv[1]. Built -O2 and static: no frame pointers, the C library in the same object, so the
 * whole user stack is unwound from its .eh_frame alone. a and b are kept as frames of their
 * own: never inlined, and each uses its callee's result after the call (no tail call).
 *
 * Then, given a file and a string (argv[2], argv[3]: the tracer's output and a word of its
 * first entry's), it stays until the file holds the string, or WAIT_MS at most: the tracer
 * reads a process's maps when it prints its first stack, and a process gone by then has its
 * frames unnamed (a fixed sleep of 2 s was not enough once in a TCG guest). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CALLS 5
#define WAIT_MS 30000

__attribute__((noinline)) long b(int fd)
{
	long got = lseek(fd, SEEK_TO, SEEK_SET);

	__asm__ volatile("" ::: "memory");
	return got + 1;
}

__attribute__((noinline)) long a(int fd)
{
	long got = b(fd);

	__asm__ volatile("" ::: "memory");
	return got + 1;
}

static int holds(const char *path, const char *word)
{
	static char text[1 << 16];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	text[n] = 0;
	return strstr(text, word) != 0;
}

int main(int argc, char **argv)
{
	int fd = open(argc > 1 ? argv[1] : "/tmp/seek", O_RDWR | O_CREAT, 0600);
	long sum = 0;

	if (fd < 0)
		return 1;
	for (int i = 0; i < CALLS; i++)
		sum += a(fd);
	printf("%ld\n", sum);
	fflush(stdout);
	for (int waited = 0; argc > 3 && waited < WAIT_MS && !holds(argv[2], argv[3]); waited += 50)
		usleep(50 * 1000);
	return 0;
}
