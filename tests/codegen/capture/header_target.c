/* What the generated header's captures read, live (tests/codegen/test_capture_header_live.py):
 * a string argument, a pointer to a struct with bit-fields, an enum, a nested struct, char
 * arrays, a string member and a pointer to another such struct; NULLs, a long string, and a
 * returned pointer. */
#include <stddef.h>
#include <stdio.h>

enum color { RED = 1, GREEN = 2, BLUE = 7 };

struct inner {
	short x;
	char tag[8];
};

struct how {
	unsigned lo : 3;
	int mid : 9;
	enum color c;
	struct inner in;
	char name[12];
	const char *label;
	struct how *next;
};

__attribute__((noinline)) int open_file(int dfd, const char *filename, struct how *how)
{
	int n = dfd;

	for (const char *p = filename; p && *p; p++)
		n += *p;
	if (how)
		n += how->mid + (how->next ? how->next->lo : 0);
	__asm__ volatile("" : "+r"(n));
	return n;
}

__attribute__((noinline)) struct how *follow(struct how *how)
{
	__asm__ volatile("" : "+r"(how));
	return how ? how->next : NULL;
}

int main(void)
{
	struct how tail = { 5, -3, RED, { 1, "t" }, "tail", NULL, NULL };
	struct how head = { 6, -200, BLUE, { -42, "inner" }, "headname", "a label", &tail };
	static const char long_name[] = "/etc/a/path/longer/than/sixteen/characters";

	printf("%d\n", open_file(-100, "/etc/hostname", &head));
	printf("%d\n", open_file(3, "/tmp/filtered-out", &head));
	printf("%d\n", open_file(4, long_name, &tail));
	printf("%d\n", open_file(5, NULL, NULL));
	printf("%p\n", (void *)follow(&head));
	printf("%p\n", (void *)follow(&tail));
	return 0;
}
