/* The user program test_typed_live.py traces in every guest (built static, with -g, by the
 * guest's cross gcc): a string argument and a pointer to a struct with a bit-field, an enum, a
 * 64-bit field (a register or stack pair on i386 and armhf, aligned 4 on one, 8 on the other),
 * a nested struct with its own 64-bit field and char array, and a char array; distinctive values
 * whose halves differ, and NULLs. */
#include <stddef.h>
#include <stdio.h>

enum mood { CALM = 3, ANGRY = 9 };

struct inner {
	char name[10];
	unsigned long long big;
};

struct visit {
	unsigned kind : 3;
	int level : 7;
	enum mood mood;
	long long stamp;
	struct inner inner;
	char code[6];
};

/* noipa: no clone of another name, no argument dropped: the symbol traced is this one. */
__attribute__((noipa)) int record_visit(const char *who, const struct visit *v)
{
	int n = 0;

	for (const char *p = who; p && *p; p++)
		n += *p;
	if (v)
		n += v->level + (int)(v->stamp & 0xff) + (int)(v->inner.big >> 56);
	return n;
}

/* A 64-bit argument before an int: a pair (r0:r1 on armhf, two stack slots on i386). A second
 * function traced, so that one of the two has a BPF cookie other than 0. */
__attribute__((noipa)) long long total(long long sum, int calls)
{
	return sum / calls;
}

int main(void)
{
	struct visit a = { 5, -33, CALM, -81985529216486895LL, { "inner-a", 0x1122334455667788ULL },
			   "xyz" };
	struct visit b = { 2, 63, ANGRY, 0x10000000007LL, { "b", 0xfffffffffffffffeULL }, "q" };

	printf("%d\n", record_visit("alpha-guest", &a));
	printf("%d\n", record_visit("beta", &b));
	printf("%d\n", record_visit(NULL, NULL));
	printf("%lld\n", total(-0x7700000001LL, 3));
	return 0;
}
