/* Known calls for btfgen trace --count / --latency (tests/trace/test_summary_live.py): nap
 * sleeps 20 ms three times (c BLUE once, RED twice), quick runs 1,000 times, work 7 times on
 * jobs named alpha (5 calls) and beta (2); hl_tick 6 times (test_summary_keys_live.py), on tags
 * kestrel (i = 0, 2, 4) and osprey (1, 3, 5) with p = {i % 3, 10}, returning -1 for i % 3 == 0
 * and p.lo + p.hi otherwise. */
#include <stdio.h>
#include <unistd.h>

enum colour { RED = 1, GREEN = 2, BLUE = 7 };

struct job {
	int id;
	const char *name;
};

struct hl_pair {
	long lo;
	long hi;
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

NOINLINE long hl_tick(long i, const char *tag, struct hl_pair p)
{
	asm volatile("" ::: "memory");
	return i % 3 == 0 ? -1 : p.lo + p.hi;
}

/* test_signals_live.py: argv[1], a file made once the calls are done (holding the pid, put in
 * place whole by a rename); then, given a second argument, wait for a signal. */
static void mark(int argc, char **argv)
{
	char part[4096];
	FILE *f;

	if (argc < 2 || snprintf(part, sizeof(part), "%s.new", argv[1]) >= (int)sizeof(part))
		return;
	f = fopen(part, "w");
	if (!f)
		return;
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
	rename(part, argv[1]);
	if (argc > 2)
		pause();
}

int main(int argc, char **argv)
{
	static struct job jobs[] = { { 1, "alpha" }, { 2, "beta" }, { 3, "alpha" } };
	static const char *tags[] = { "kestrel", "osprey" };
	volatile char touched = 0;
	int i, acc = 0;

	/* A uprobe reads memory without faulting it in: touch the names first. */
	for (i = 0; i < 3; i++)
		touched ^= jobs[i].name[0];
	for (i = 0; i < 2; i++)
		touched ^= tags[i][0];
	for (i = 0; i < 3; i++)
		acc += nap(20, i == 1 ? BLUE : RED);
	for (i = 0; i < 1000; i++)
		acc += quick(i);
	for (i = 0; i < 7; i++)
		acc += work(&jobs[i % 3]);
	for (i = 0; i < 6; i++)
		acc += hl_tick(i, tags[i % 2], (struct hl_pair){ i % 3, 10 });
	mark(argc, argv);
	return acc == 12345;
}
