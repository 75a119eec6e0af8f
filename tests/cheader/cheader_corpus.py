"""A header of declarations chosen for what tends to go wrong when types are laid out, and the C
file that defines its functions so a real compiler + pahole can give the BTF to compare with."""

HEADER = r"""
#include <stdbool.h>

struct bits {
    unsigned a:3;
    int b:5;
    unsigned :0;              /* unnamed: padding, not a member */
    unsigned long long c:40;
    bool d:1;
    char e;
    int :4;
    short f:7;
};

struct __attribute__((packed)) packed { char c; int i; short s; long long ll; };
struct __attribute__((packed, aligned(2))) packed2 { char c; int i; };

struct nest {
    int kind;
    union {
        int i;
        long l;
        struct { short lo, hi; };
    };
    struct { char tag[3]; } named;
    union { unsigned char raw[6]; unsigned short half[3]; } u;
};

enum neg { NEG_A = -5, NEG_B = 0, NEG_C = 7 };
enum big { BIG_A = 1, BIG_B = 0x123456789ULL };
enum bigneg { BN_A = -1, BN_B = 0x7fffffffffffLL };
enum small { SMALL_A, SMALL_B };
enum byte_enum { BE_A = 200 } __attribute__((packed));

typedef int (*cb_t)(void *, long);
struct ops {
    cb_t cb;
    void (*done)(struct ops *, int);
    const char *name;
    int (*fmt)(const char *, ...);
};
struct list { struct list *next, *prev; };
struct arr { int m[2][3]; long n; char tail[]; };
struct two_ll { long long a, b; };
struct mixed { char c; long long ll; char d; };
struct three_int { int a, b, c; };
struct one_char { char c; };
struct aligned16 { int x; } __attribute__((aligned(16)));
typedef unsigned long ulong_t;
typedef const volatile int cvint;
typedef struct { int x, y; } point_t;
typedef union { long l; void *p; } word_t;
struct fwd;

long f_bits(struct bits b, struct packed p, struct packed2 q);
int f_nest(struct nest n, enum neg e, enum big g, enum small s, enum byte_enum be);
void *f_ops(const struct ops *ops, cb_t cb, struct list *l, struct fwd *opaque);
int f_var(const char *fmt, ...);
bool f_bool(bool a, char c, signed char sc, unsigned char uc, short s, unsigned short us);
struct two_ll f_ret(int a, long long b, struct mixed m, ulong_t u, cvint *p);
unsigned long f_arr(int a[4], char s[], struct arr *x, int (*m)[3], const int * restrict r);
long long f_many(int a, int b, int c, int d, int e, int f, int g, int h, int i, long long j,
                 char k, struct three_int t);
enum bigneg f_en64(enum bigneg x, struct one_char oc, point_t pt, word_t w);
struct three_int f_small_ret(struct aligned16 a, unsigned long long b, void (*cb)(void));
point_t f_point(point_t a, point_t *b, unsigned int n);
void f_void(void);
struct fpair { float f; double d; };
double f_float(float a, double b, struct fpair p, long double ld, int i);
#ifdef __SIZEOF_INT128__
__int128 f_i128(int a, __int128 b, unsigned __int128 c);
#endif
"""

# Each definition uses every parameter, so -O2 neither drops nor clones any, and stays out of line.
DEFINITIONS = r"""
#define KEEP __attribute__((noinline, used))
volatile long sink;
volatile float fsink;  /* no float arithmetic: soft-float targets would need libgcc */
volatile double dsink;
volatile long double ldsink;
KEEP long f_bits(struct bits b, struct packed p, struct packed2 q)
{ sink = b.a + b.b + b.c + b.d + b.e + b.f; return p.i + p.ll + q.i; }
KEEP int f_nest(struct nest n, enum neg e, enum big g, enum small s, enum byte_enum be)
{ return n.kind + n.l + n.named.tag[1] + n.u.raw[5] + e + (int)g + s + be; }
KEEP void *f_ops(const struct ops *ops, cb_t cb, struct list *l, struct fwd *opaque)
{ sink = (long)cb + (long)l->next; return (void *)((long)ops->name + (long)opaque); }
KEEP int f_var(const char *fmt, ...) { __builtin_va_list ap; __builtin_va_start(ap, fmt);
  int r = __builtin_va_arg(ap, int) + *fmt; __builtin_va_end(ap); return r; }
KEEP bool f_bool(bool a, char c, signed char sc, unsigned char uc, short s, unsigned short us)
{ return a ^ (c + sc + uc + s + us > 7); }
KEEP struct two_ll f_ret(int a, long long b, struct mixed m, ulong_t u, cvint *p)
{ struct two_ll r = { a + b + m.c + m.ll + m.d, u + *p }; return r; }
KEEP unsigned long f_arr(int a[4], char s[], struct arr *x, int (*m)[3], const int * restrict r)
{ return a[3] + s[1] + x->m[1][2] + x->tail[0] + m[1][2] + *r; }
KEEP long long f_many(int a, int b, int c, int d, int e, int f, int g, int h, int i, long long j,
                      char k, struct three_int t)
{ return a + b + c + d + e + f + g + h + i + j + k + t.a + t.c; }
KEEP enum bigneg f_en64(enum bigneg x, struct one_char oc, point_t pt, word_t w)
{ sink = oc.c + pt.y + w.l; return x; }
KEEP struct three_int f_small_ret(struct aligned16 a, unsigned long long b, void (*cb)(void))
{ struct three_int r = { a.x, (int)b, 3 }; cb(); return r; }
KEEP point_t f_point(point_t a, point_t *b, unsigned int n)
{ point_t r = { a.x + b->x, a.y + (int)n }; return r; }
KEEP void f_void(void) { sink = 1; }
KEEP double f_float(float a, double b, struct fpair p, long double ld, int i)
{ fsink = a; fsink = p.f; dsink = p.d; ldsink = ld; sink = i; return b; }
#ifdef __SIZEOF_INT128__
KEEP __int128 f_i128(int a, __int128 b, unsigned __int128 c) { return a + b + c; }
#endif
"""

SOURCE = HEADER + DEFINITIONS
