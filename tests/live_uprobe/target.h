/* Functions the live uprobe tests trace; target.c calls each with the values in EXPECTED
 * (test_*.py). Every shape the x86_64 convention treats differently: narrow and negative
 * scalars, a struct in two registers, a struct in memory, a 16-byte struct returned in rax:rdx,
 * a 24-byte struct returned through a hidden pointer, and arguments past the sixth register. */
#ifndef LIVE_TARGET_H
#define LIVE_TARGET_H
#include <stdbool.h>

enum color { RED = -2, GREEN = 1, BLUE = 7 };
struct pair { long a; long b; };
struct big { long x, y, z; };
struct small { int a; short b; signed char c; bool d; };
struct flags { unsigned lo:3; int mid:9; unsigned hi:20; };

long add7(long a, int b, short c, signed char d, unsigned e, long f, long g);
long take_pair(struct pair p, int k);
long take_big(int k, struct big b, enum color c);
struct pair make_pair(long a, long b);
struct big make_big(long a);
int many(int a, int b, int c, int d, int e, int f, int g, int h, struct small s, char i);
unsigned take_flags(struct flags f, bool yes, unsigned long long u);
#endif
