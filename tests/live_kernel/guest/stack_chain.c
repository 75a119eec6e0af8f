/* A known user call chain into the kernel, for `btfgen trace --kernel --stack kernel,user`
 * (tests/live_kernel/test_trace_stack.py): main -> a -> b -> lseek, CALLS times, on the file
 * argv[1]. Built -O2 and static: no frame pointers, the C library in the same object, so the
 * whole user stack is unwound from its .eh_frame alone. a and b are kept as frames of their
 * own: never inlined, and each uses its callee's result after the call (no tail call). It then
 * waits a little: the tracer reads a process's maps when it prints its first stack. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define CALLS 5

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
	sleep(2);
	return 0;
}
