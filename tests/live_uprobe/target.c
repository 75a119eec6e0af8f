#include "target.h"
#define TRACED __attribute__((noipa))

TRACED long add7(long a, int b, short c, signed char d, unsigned e, long f, long g)
{ return a + b + c + d + e + f + g; }
TRACED long take_pair(struct pair p, int k) { return p.a * k + p.b; }
TRACED long take_big(int k, struct big b, enum color c) { return k + b.x + b.y + b.z + c; }
TRACED struct pair make_pair(long a, long b) { struct pair p = { a * 2, b - 1 }; return p; }
TRACED struct big make_big(long a) { struct big b = { a, a + 1, -a }; return b; }
TRACED int many(int a, int b, int c, int d, int e, int f, int g, int h, struct small s, char i)
{ return a + b + c + d + e + f + g + h + s.a + s.b + s.c + s.d + i; }
TRACED unsigned take_flags(struct flags f, bool yes, unsigned long long u)
{ return f.lo + f.mid + f.hi + yes + (unsigned)u; }

int main(void)
{
    struct pair p = { -5, 1234567890123L };
    struct big b = { 11, -22, 33 };
    struct small s = { -70000, -300, -7, true };
    struct flags fl = { 5, -200, 987654 };
    volatile long sink = 0;
    sink += add7(-1, -2, -3, -4, 4000000000u, 0x123456789abcL, -77);
    sink += take_pair(p, 3);
    sink += take_big(-9, b, BLUE);
    sink += make_pair(21, -8).b;
    sink += make_big(1000).z;
    sink += many(1, -2, 3, -4, 5, -6, 7, -8, s, 'Z');
    sink += take_flags(fl, true, 0xfedcba9876543210ULL);
    return (int)(sink & 0);
}
