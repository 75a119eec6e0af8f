"""The program test_errno_live.py traces (and the 6.1 guest's errno step,
tests/live_kernel/test_trace_user_sizes.py): functions whose -1, NULL or other return comes
with a failed system call inside the call, with none, or after an older one."""

TARGET = r"""
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>

/* -1: libc's open failed in openat (ENOENT), the call's last system call */
int __attribute__((noipa)) open_missing(const char *path) { return open(path, O_RDONLY); }
/* NULL: fopen's openat failed (ENOENT) */
FILE *__attribute__((noipa)) fopen_missing(const char *path) { return fopen(path, "r"); }
/* -1 with errno EINVAL set by libc itself: no system call at all */
int __attribute__((noipa)) bad_signal(int sig)
{
	sigset_t s;

	sigemptyset(&s);
	return sigaddset(&s, sig);
}
/* -1 from the program itself; its thread's errno (EINVAL) and last failed system call
 * (ENOENT) are older than the call */
int __attribute__((noipa)) plain_fail(int x) { return x < 0 ? -1 : x; }
/* -2, its own error code */
int __attribute__((noipa)) neg_fail(int x) { return x < 0 ? -2 : x; }
/* open fails (ENOENT), then a system call succeeds: the last one did not fail */
int __attribute__((noipa)) fail_then_ok(const char *path)
{
	int fd = open(path, O_RDONLY);

	syscall(SYS_getppid);
	return fd;
}
int __attribute__((noipa)) count(int x) { return x; }
volatile long sink;
int main(int argc, char **argv)
{
	int r;

	r = open_missing(argv[1]);
	printf("open_missing %d %d\n", r, errno);
	sink = (long)fopen_missing(argv[1]);
	r = bad_signal(-5);
	printf("bad_signal %d %d\n", r, errno);
	r = plain_fail(-3);
	printf("plain_fail %d %d\n", r, errno);
	sink = neg_fail(-3);
	sink = fail_then_ok(argv[1]);
	sink = count(1);
	sink = count(7);
	return 0;
}
"""
FUNCS = ["open_missing", "fopen_missing", "bad_signal", "plain_fail", "neg_fail",
         "fail_then_ok", "count"]
