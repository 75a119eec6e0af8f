/* Prototypes whose placement tests/abi/test_placement.py checks, one function per case.
 * Compiled per arch with the kernel's ABI flags (tests/toolchains.py) at -O0 so every function
 * keeps its DWARF prototype; pahole -J turns that into the BTF btfgen reads. */
struct s3 { char a[3]; };
struct s4 { char a[4]; };
struct s8 { int a, b; };
struct s12 { int a, b, c; };
struct s16 { long long a, b; };
struct s24 { long long a, b, c; };
struct s72 { long long a[9]; };
struct __attribute__((packed)) p5 { char c; int i; };
struct __attribute__((packed)) p9 { char c; long long l; };
struct dl { double d; long l; };
#ifdef __SIZEOF_INT128__
struct a16 { __int128 x; };  /* BTF records no __aligned(): the alignment must be natural */
#else
struct a16 { long long x, y; };
#endif
struct bf { unsigned a:3, b:20; unsigned char c; };
struct nest { struct s3 x; short y; };
union u8 { int i; char c[8]; };
struct f1 { float f; };
struct f2 { float a, b; };
enum e { E0, E1 = -1 };

void f_ll(int a, long long b, int c) {}
void f_ll3(int a, int b, int c, long long d, int e) {}
void f_s12(int a, int b, struct s12 s, int d) {}
void f_s16(int a, int b, int c, struct s16 s, int d) {}
void f_7s16(int a, int b, int c, int d, int e, int f, int g, struct s16 s, int h) {}
void f_9(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j) {}
void f_d(int a, double d, float f, int b) {}
void f_s24(int a, struct s24 s) {}
void f_s3(struct s3 s, struct s4 t, int a) {}
void f_x1(int a, int b, int c, int d, int e, struct s16 s, long f) {}
void f_p(struct p5 a, struct p9 b, int c) {}
void f_dl(struct dl a, int b) {}
void f_a16(int a, struct a16 s, int b) {}
void f_s72(int a, struct s72 s, int b) {}
void f_ll7(int a, int b, int c, int d, int e, int f, int g, long long h, int i) {}
void f_ll8(int a, int b, int c, int d, int e, int f, int g, int h, int i, long long j) {}
void f_c9(long a, long b, long c, long d, long e, long f, long g, long h, char i, short j) {}
void f_bf(struct bf a, int b) {}
void f_misc(_Bool b, unsigned char c, short s, enum e e, void *p, union u8 u) {}
void f_nest(struct nest n, struct f2 f) {}
void f_va(int a, long b, ...) {}
struct s8 r_s8(int a) { struct s8 r = {0}; return r; }
struct s12 r_s12(int a) { struct s12 r = {0}; return r; }
struct s16 r_s16(int a) { struct s16 r = {0}; return r; }
struct s24 r_s24(int a) { struct s24 r = {0}; return r; }
struct s3 r_s3(int a) { struct s3 r = {{0}}; return r; }
struct s4 r_s4(int a) { struct s4 r = {{0}}; return r; }
struct f1 r_f1(int a) { struct f1 r = {0}; return r; }
struct f2 r_f2(int a) { struct f2 r = {0}; return r; }
long long r_ll(int a) { return a; }
float r_f(int a) { return a; }
signed char r_c(int a) { return a; }
#ifdef __SIZEOF_INT128__
void f_i128(int a, __int128 b, int c) {}
void f_8i128(int a, int b, int c, int d, int e, int f, int g, int h, int i, __int128 j) {}
__int128 r_i128(int a) { return a; }
#endif
