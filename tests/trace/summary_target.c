/* Known calls for btfgen trace --count / --latency (tests/trace/test_summary_live.py): nap
 * sleeps 20 ms three times (c BLUE once, RED twice), quick runs 1,000 times, work 7 times on
 * jobs named alpha (5 calls) and beta (2). */
#include <unistd.h>

enum colour { RED = 1, GREEN = 2, BLUE = 7 };

struct job {
	int id;
	const char *name;
};

#define NOINLINE __attribute__((noinline, used))

NOINLINE int nap(int ms, enum colour c)
{
	asm volatile("" ::: "memory");
	usleep(ms * 1000);
	return c;
}

NOINLINE int quick(int x)
{
	asm volatile("" ::: "memory");
	return x + 1;
}

NOINLINE int work(struct job *j)
{
	asm volatile("" ::: "memory");
	return j->id;
}

int main(void)
{
	static struct job jobs[] = { { 1, "alpha" }, { 2, "beta" }, { 3, "alpha" } };
	volatile char touched = 0;
	int i, acc = 0;

	/* A uprobe reads memory without faulting it in: touch the names first. */
	for (i = 0; i < 3; i++)
		touched ^= jobs[i].name[0];
	for (i = 0; i < 3; i++)
		acc += nap(20, i == 1 ? BLUE : RED);
	for (i = 0; i < 1000; i++)
		acc += quick(i);
	for (i = 0; i < 7; i++)
		acc += work(&jobs[i % 3]);
	return acc == 12345;
}
