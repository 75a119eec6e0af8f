/* Calls for btfgen trace --filter: each function is called with values on both sides of the
 * filters tests/trace/test_filter_live.py gives. */
#include <stddef.h>

enum colour { RED = 1, GREEN = 2, BLUE = 7 };

struct node {
	int kind;
	unsigned mode : 3, busy : 1;
	int lvl : 5;
	const char *name;
	struct node *next;
	char tag[8];
};

#define NOINLINE __attribute__((noinline, used))

NOINLINE long f_int(long a, unsigned long b, int flags, enum colour c)
{
	asm volatile("" ::: "memory");
	return a + (long)b + flags + c;
}

NOINLINE int f_node(struct node *n)
{
	asm volatile("" ::: "memory");
	return n ? n->kind : -1;
}

NOINLINE int f_str(const char *s)
{
	asm volatile("" ::: "memory");
	return s ? s[0] : 0;
}

NOINLINE int f_ret(int x)
{
	asm volatile("" ::: "memory");
	return x * 2 - 5;
}

int main(void)
{
	static struct node inner = { .kind = 9, .name = "inner", .tag = "deep" };
	static struct node nodes[] = {
		{ .kind = 1, .mode = 5, .busy = 1, .lvl = -3, .name = "alpha", .next = &inner, .tag = "x" },
		{ .kind = 2, .mode = 2, .busy = 0, .lvl = 4, .name = "beta", .next = NULL, .tag = "deep" },
		{ .kind = 3, .mode = 7, .busy = 1, .lvl = 15, .name = "alphabet", .next = &inner, .tag = "y" },
	};
	static const char *strs[] = { "/etc/passwd", "/etc", "/tmp/x", "/etc/", "" };
	volatile char touched = 0;
	long acc = 0;
	int i;

	/* A uprobe reads memory without faulting it in: touch every string first, or a string
	 * on a page the program has not used yet reads as a fault (and fails the filter). */
	for (i = 0; i < 5; i++)
		touched ^= strs[i][0];
	for (i = 0; i < 3; i++)
		touched ^= nodes[i].name[0];

	acc += f_int(-5, 10, 0x800, RED);
	acc += f_int(-1, 20, 0x801, GREEN);
	acc += f_int(3, 5000, 0x0, BLUE);
	acc += f_int(-2, 1UL << 63, 0x880, BLUE);
	for (i = 0; i < 3; i++)
		acc += f_node(&nodes[i]);
	acc += f_node(NULL);
	for (i = 0; i < 5; i++)
		acc += f_str(strs[i]);
	acc += f_str(NULL);
	for (i = 0; i < 6; i++)
		acc += f_ret(i);
	return acc == 12345 ? 1 : 0;
}
