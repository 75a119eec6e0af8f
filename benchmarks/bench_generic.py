#!/usr/bin/env python3
"""The generic decoder's cost per call, next to the per-function decoder and hand-written reads.

  python3 benchmarks/bench_generic.py [--repeat N] [--runs N] [--batch N] [--no-kernel]
                                      [--ctx pt_regs|trampoline|both]

Two x86_64 prototypes from a C header (through libclang, as `btfgen --header` reads them):
`f6` (6 scalars, all in registers) and `f12` (12 arguments: 6 in registers, 6 on the stack).
For each, BPF programs decode the same argument image (a pt_regs image and a stack image,
both kernel memory: global variables) into a global record:

- generic: `btfgen_generic_decode_by_cookie()`, the route `btfgen trace` takes: by the
  function's attach cookie where it names the register image (`btfgen_generic_decode_cookie()`:
  nothing else needed), else by its spec, looked up in an array map by the cookie's key. The
  cookie is read from a global array, as the program has it from bpf_get_attach_cookie(): not
  known to clang nor to the verifier. The program holds the straight-line decoders of the whole
  running kernel too (unless --no-kernel). f6's goal figure is its image path alone,
  `btfgen_generic_decode_cookie()`, as `btfgen trace` runs it for a call on the image (below);
- by its spec: `btfgen_generic_decode()` with the spec looked up in the map at every decode
  (the route of functions off the image, and what every call took before the cookie named the
  image): the spec names its straight-line decoder;
- its spec in hand: by its spec, the spec looked up once a run, not once a decode: the
  dispatch and the decoder without the lookup;
- its decoder alone: the same straight-line decoder with its number known at compile time (no
  lookup, no record header, no switch): what generic adds is the difference;
- interpreter: the same spec run by the ops interpreter (`btfgen_generic_interpret()`), what
  every spec ran before the straight-line decoders;
- per-function: `btfgen_entry_<name>_sp()`, the generated decoder;
- hand-written: the record's header with the function's id (a constant: a record says whose it
  is), `PT_REGS_PARM1..6` loads, and for f12 one `bpf_probe_read_kernel` of the six stack slots
  (the cheapest a hand-written decoder can do);
- hand-written through a table: the seeds' design by hand, the function's entry looked up in
  the same array map, the record's header, then a switch to the hand-written reads: what a
  hand-written mass-attach program pays, so generic's own cost is the difference;
- hand-written, its id from the cookie: hand-written, but the record's header from the same
  cookie as generic's (read from memory, shifted and masked): the least a program shared by
  many functions pays to say whose a record is.

A third function, `fs(const char *name, long n)`, has its string captured (the default of
`btfgen trace`): generic (by its spec: the image does not capture), interpreter, and by hand
(the registers, then `bpf_probe_read_kernel_str`), to show captures take the straight-line route
too.

The mix: 256 of the running kernel's functions (every n-th), decoded in a pseudo-random order,
generic, by its spec and interpreter, as calls of many functions interleave under mass attach:
a branch on the function mispredicts there, where one function decoded over and over is always
predicted.
Its argument registers point to a buffer, so reads through them succeed.

Each program decodes --batch times per run (the kernel reports whole nanoseconds per run, so a
batch gives a finer figure per decode) under BPF_PROG_TEST_RUN with `repeat` (a `tc` program, so
the kernel repeats it and reports the mean time per run), in one of two ways:

- in a loop of its own (`may_goto`): f6's generic on the image, its decoder alone, per-function,
  hand-written and its id from the cookie. A program then pays its frame (the registers its code
  saves) once a run, as a real program pays it once a call whatever it decodes: it keeps its
  ctx across the helper calls for the cookie and the ring buffer. f6's goal is taken here;
- a decode a bpf_loop callback: every program, f6's too. The verifier cannot walk a spec's
  route in a loop (the interpreter's own loop inside one never converges). Each decode then
  pays its callback's frame: generic's decoders make helper calls on paths f6 never takes, so
  its frame saves registers that the hand-written f6 body, which makes no call, does not. f12's
  programs all make a helper call, so their frames are alike and f12's goal is taken here.

The trampoline's ctx (--ctx trampoline; --ctx here picks the contexts timed): the same three
functions from a header generated for it, where each argument is a u64 slot. This kernel (6.18)
has no fentry to time, so the slot array is memory the program reads as a trampoline program
reads its ctx: a global array whose word below the ctx holds the argument count, and
bpf_get_func_arg, bpf_get_func_ret and bpf_get_func_arg_cnt are the instructions the verifier
puts in their place in a tracing program (in asm, opaque to clang as a helper call is), for the
generated and the hand-written code alike. f6 and f12 are both on the slot image (12 slots); both
decode in the program's own loop (no helper call): generic (its image, by the cookie),
per-function (btfgen_entry_NAME: its slot reads are calls of btfgen_tramp_slot), hand-written
(the record's header, then each slot with bpf_get_func_arg, as a tracing_multi program must read
them) and its id from the cookie; fs a decode a callback (its spec's route, the capture's helper
call). Built as `btfgen trace` builds its trampoline programs (-mcpu=v4: every slot read
inlined), and two variants built without -mcpu=v4: every read a call of btfgen_tramp_slot
(__noinline there), and the header as it is (only the image's reads inlined).

An empty program of the same kind gives the overhead, subtracted. Best of --runs, per load of
the object; shown is the median of --loads loads (each places the programs' code anew, which
moves a callback's sub-nanosecond figures by a nanosecond or two, a loop's by a fifth of one),
and how far the loads were apart. Needs root (BPF), clang-19 and this machine's kernel (x86_64,
6.9 or later for may_goto). Goal (issue 24): generic <= 1.3x hand-written. Then the distinct
plans per arch (benchmarks/bench_plans.py) of the running kernel and the live tests' kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "codegen"))
sys.path.insert(0, str(ROOT / "benchmarks"))

HEADER = """
long f6(long a, int b, unsigned short c, void *d, unsigned char e, long long f);
long f12(long a1, long a2, long a3, long a4, long a5, long a6,
         long a7, long a8, long a9, long a10, long a11, long a12);
long fs(const char *name, long n);
"""

# may_goto: a loop the verifier checks once, not once a decode (6.9+).
# The globals both programs (pt_regs and trampoline) hold: the outputs and the batch.
SHARED_GLOBALS = r"""struct btfgen_record rec;
struct btfgen_args_f6 out6;
struct btfgen_args_f12 out12;
struct { long v[12]; } hand;
int failed;
/* LOOPED's decodes a run, from memory: a bound the verifier does not know is a loop it checks
 * once (may_goto), not once a decode. */
volatile __u32 batch = BATCH;

"""
LOOP_MACROS = r"""#define can_loop \
	({ \
		__label__ out, in; \
		int more = 1; \
		asm volatile goto("may_goto %l[out]" :::: out); \
		goto in; \
	out: \
		more = 0; \
	in: \
		more; \
	})
"""

PROGRAM = r"""
#include "btfgen.bpf.h" /* self-contained: the __u types and bpf_helpers.h */
char LICENSE[] SEC("license") = "GPL";

struct { __uint(type, 2 /* BPF_MAP_TYPE_ARRAY */); __uint(max_entries, 3 + MIX);
	__type(key, __u32); __type(value, struct btfgen_spec); } specs SEC(".maps");
/* Each function's attach cookie (spec_format.cookie), by key: what bpf_get_attach_cookie()
 * gives a mass-attach program, here from memory, so that neither clang nor the verifier
 * knows it. */
__u64 cookies[3 + MIX] = { COOKIES };

#define NAME "/etc/passwd" /* fs's string argument */
const char name[] = NAME;
char hand_name[256]; /* the capture's default string size */

__u64 regs_image[32]; /* the pt_regs image (168 bytes on x86_64) */
__u64 stack[16];      /* the stack image: the return address, then the stack arguments */
SHARED_GLOBALS
#define SP ((__u64)(unsigned long)stack)

/* LOOPED: a program decodes `batch` times a run in a loop of its own, so that it pays its frame
 * (the registers it saves) once a run: a real program pays it once a call whatever it decodes
 * (it keeps its ctx across the cookie's and the ring buffer's helper calls), where a callback
 * a decode made a program whose decoder holds helper calls on paths not taken pay it at every
 * decode, and a hand-written one with no call not at all. Each decode starts from a pointer to
 * the image clang cannot follow and from memory it must read again, so none of its loads moves
 * out of the loop, and none of its stores is merged with the next decode's. A failed decode is
 * counted in `failed`. */
#define DECODES(prepare, body) \
	{ \
		prepare; \
		for (__u32 n = batch; n && can_loop; n--) { \
			const __u64 *regs __attribute__((unused)) = regs_image; \
			asm volatile("" : "+r"(regs) : : "memory"); \
			if (body) \
				failed++; \
		} \
		return failed; \
	}
LOOP_MACROS
#define LOOPED(name, body) SEC("tc") int name(void *skb) DECODES(, body)
/* BATCHED: a decode a bpf_loop callback, for whatever the verifier cannot walk in a loop: the
 * interpreter's own loop inside one never converges (a million instructions), and every spec's
 * route holds the interpreter. */
#define BATCHED(name, body) CALLBACKS(name, , body)
#define CALLBACKS(name, prepare, body) \
	static long name##_body(__u64 i, void *c) \
	{ \
		const __u64 *regs __attribute__((unused)) = regs_image; \
		if (body) \
			failed++; \
		return 0; \
	} \
	SEC("tc") int name(void *skb) { prepare; bpf_loop(BATCH, name##_body, 0, 0); return failed; }

/* fs's first argument register points to `name` (its address is only known here). */
static __always_inline void point_name(void)
{
	regs_image[14] = (unsigned long)name;
}

enum route { COOKIE, SPEC, INTERPRET };

static __always_inline int generic(const __u64 *regs, __u32 key, enum route route)
{
	struct btfgen_spec *s;

	if (key >= 3 + MIX)
		return 1;
	if (route == COOKIE)
		return btfgen_generic_decode_by_cookie(regs, SP, cookies[key], &specs, 0, &rec);
	s = bpf_map_lookup_elem(&specs, &key);
	if (!s)
		return 1;
	if (route != INTERPRET)
		return btfgen_generic_decode(regs, SP, s, 0, &rec);
	rec.btf_id = s->btf_id;
	rec.kind = 0;
	rec.failed = 0;
	return btfgen_generic_interpret(regs, SP, s, 0, &rec);
}

/* x86_64 pt_regs: di 112, si 104, dx 96, cx 88, r8 72, r9 64 (PT_REGS_PARM1..6). */
#define PARM(n, off) hand.v[n] = *(volatile long *)((char *)regs + (off))
/* A hand-written program's record says whose it is too: its function's id, a constant. */
#define HEAD(id) (rec.btf_id = (id), rec.kind = 0)
static __always_inline int hand6(const __u64 *regs)
{
	PARM(0, 112); PARM(1, 104); PARM(2, 96); PARM(3, 88); PARM(4, 72); PARM(5, 64);
	return 0;
}

static __always_inline int hand12(const __u64 *regs)
{
	hand6(regs);
	return bpf_probe_read_kernel(&hand.v[6], 48, (void *)(unsigned long)(SP + 8));
}

/* fs: its two registers and the string (a helper call, as the capture's). */
static __always_inline int hand_s(const __u64 *regs)
{
	PARM(0, 112); PARM(1, 104);
	return bpf_probe_read_kernel_str(hand_name, sizeof(hand_name),
					 (void *)(unsigned long)hand.v[0]) != sizeof(NAME);
}

/* Hand-written, the record's header from the cookie: the least a shared program pays. */
static __always_inline int hand_cookie(const __u64 *regs, __u32 key)
{
	__u64 head = BTFGEN_COOKIE_BTF_ID(cookies[key & 1]);

	__builtin_memcpy(&rec, &head, 8);
	return hand6(regs);
}

/* The seeds' design, written by hand: the function's entry found in the same table, the
 * record's header, then a switch to its own reads. What generic adds over this is btfgen's. */
static __always_inline int hand_table(const __u64 *regs, __u32 key)
{
	struct btfgen_spec *s = bpf_map_lookup_elem(&specs, &key);

	if (!s)
		return 1;
	rec.btf_id = s->btf_id;
	rec.kind = 0;
	rec.failed = 0;
	switch (s->btf_id) {
	case BTFGEN_ID_f6:
		return hand6(regs);
	case BTFGEN_ID_f12:
		return hand12(regs);
	case BTFGEN_ID_fs:
		return hand_s(regs);
	}
	return 1;
}

/* The straight-line decoder alone, its number known at compile time (the switch folds away):
 * what generic adds over it is the spec's lookup, the record header and the switch. */
static __always_inline int straight(const __u64 *regs, __u32 plan)
{
	return btfgen_straight(regs, SP, 0, plan, 0, &rec) != 0;
}

/* Generic with its spec in hand, found once a run (as the trace program finds it before the
 * ring buffer's reservation, for its filter): the dispatch and the decoder without the lookup. */
struct given { const struct btfgen_spec *s; };
#define GIVEN(name, key) \
	static long name##_body(__u64 i, struct given *c) \
	{ \
		if (btfgen_generic_decode(regs_image, SP, c->s, 0, &rec)) \
			failed++; \
		return 0; \
	} \
	SEC("tc") int name(void *skb) \
	{ \
		__u32 k = (key); \
		struct given c = { bpf_map_lookup_elem(&specs, &k) }; \
		if (!c.s) \
			return 1; \
		bpf_loop(BATCH, name##_body, &c, 0); \
		return failed; \
	}

/* The mix: MIX of the running kernel's functions (keys 3.., every n-th one), decoded in a
 * pseudo-random order (an LCG), as calls of many functions interleave under mass attach; its
 * arguments point to `pointee`, so reads through them succeed. A failed decode is not an error
 * here (a stack argument past the image may be). empty_mix: the LCG alone, subtracted. */
__u64 mix_state;
__u8 pointee[4096];
__u32 mix_key;
static __always_inline __u32 next_key(void)
{
	mix_state = mix_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return 3 + (__u32)(mix_state >> 33) % MIX;
}

static __always_inline void point_args(void)
{
	regs_image[14] = regs_image[13] = regs_image[12] = regs_image[11] = regs_image[9] =
		regs_image[8] = (unsigned long)pointee;
}

#define MIXED(name, body) CALLBACKS(name, point_args(), (body, 0))

MIXED(empty_mix, mix_key = next_key())
MIXED(generic_mix, generic(regs, next_key(), COOKIE))
MIXED(spec_mix, generic(regs, next_key(), SPEC))
MIXED(interpreter_mix, generic(regs, next_key(), INTERPRET))
GIVEN(given_f6, 0)
GIVEN(given_f12, 1)

BATCHED(empty, 0)

/* What btfgen trace runs for a call its cookie puts on the register image: the test of the
 * cookie's bit, the record's header from the cookie, the image (its spec is never looked up). */
static __always_inline int image(const __u64 *regs, __u32 key)
{
	return btfgen_generic_decode_cookie(regs, cookies[key], 0, &rec) != 0;
}

LOOPED(loop_empty, 0)
LOOPED(loop_image_f6, image(regs, 0))
LOOPED(loop_straight_f6, straight(regs, PLAN_F6))
LOOPED(loop_function_f6, btfgen_entry_f6_sp(regs, SP, &out6))
LOOPED(loop_hand_f6, (HEAD(BTFGEN_ID_f6), hand6(regs)))
LOOPED(loop_cookiehand_f6, hand_cookie(regs, 0))
BATCHED(straight_f6, straight(regs, PLAN_F6))
BATCHED(straight_f12, straight(regs, PLAN_F12))
BATCHED(generic_f6, generic(regs, 0, COOKIE))
BATCHED(generic_f12, generic(regs, 1, COOKIE))
BATCHED(spec_f6, generic(regs, 0, SPEC))
BATCHED(spec_f12, generic(regs, 1, SPEC))
BATCHED(interpreter_f6, generic(regs, 0, INTERPRET))
BATCHED(interpreter_f12, generic(regs, 1, INTERPRET))
BATCHED(function_f6, btfgen_entry_f6_sp(regs, SP, &out6))
BATCHED(function_f12, btfgen_entry_f12_sp(regs, SP, &out12))
BATCHED(hand_f6, (HEAD(BTFGEN_ID_f6), hand6(regs)))
BATCHED(hand_f12, (HEAD(BTFGEN_ID_f12), hand12(regs)))
BATCHED(table_f6, hand_table(regs, 0))
BATCHED(table_f12, hand_table(regs, 1))
BATCHED(cookiehand_f6, hand_cookie(regs, 0))
BATCHED(generic_fs, (point_name(), generic(regs, 2, COOKIE)))
BATCHED(interpreter_fs, (point_name(), generic(regs, 2, INTERPRET)))
BATCHED(hand_fs, (point_name(), HEAD(BTFGEN_ID_fs), hand_s(regs)))
BATCHED(table_fs, (point_name(), hand_table(regs, 2)))
"""
PROGRAM_TRAMP = r"""
/* A trampoline's slots are read with bpf_get_func_arg, bpf_get_func_ret and
 * bpf_get_func_arg_cnt, which the verifier replaces, in a tracing program, with a few
 * instructions of its own (do_misc_fixups, Linux 7.x): the slot count is the low byte of the
 * word below the ctx, a slot the ctx's word at its index, the return value the word at the
 * count. A tc program has no such helpers: here they are those instructions, in asm (opaque to
 * clang, as a helper call is: it neither merges nor moves them), for the generated code and
 * the hand-written alike. Function-like macros, defined before the header: they leave
 * bpf_helper_defs.h's declarations of the helpers as they are. */
#define bpf_get_func_arg(ctx, n, value) tramp_get_func_arg((ctx), (n), (value))
#define bpf_get_func_ret(ctx, value) tramp_get_func_ret((ctx), (value))
#define bpf_get_func_arg_cnt(ctx) tramp_get_func_arg_cnt(ctx)
static inline __attribute__((always_inline)) long tramp_get_func_arg_cnt(void *ctx)
{
	long nr;

	asm volatile("%[nr] = *(u64 *)(%[ctx] - 8)\n\t"
		     "%[nr] &= 0xff"
		     : [nr] "=r"(nr) : [ctx] "r"(ctx) : "memory");
	return nr;
}
static inline __attribute__((always_inline)) long tramp_get_func_arg(void *ctx, unsigned int n,
								     unsigned long long *value)
{
	unsigned long long i = n, nr;
	long ret;

	asm volatile("%[nr] = *(u64 *)(%[ctx] - 8)\n\t"
		     "%[nr] &= 0xff\n\t"
		     "if %[i] >= %[nr] goto 1f\n\t"
		     "%[i] <<= 3\n\t"
		     "%[i] += %[ctx]\n\t"
		     "%[nr] = *(u64 *)(%[i] + 0)\n\t"
		     "*(u64 *)(%[v] + 0) = %[nr]\n\t"
		     "%[ret] = 0\n\t"
		     "goto 2f\n"
		     "1:\n\t"
		     "%[ret] = -22\n"
		     "2:"
		     : [ret] "=&r"(ret), [nr] "=&r"(nr), [i] "+r"(i)
		     : [ctx] "r"(ctx), [v] "r"(value) : "memory");
	return ret;
}
/* fexit's and fsession's (an fentry program's is -EOPNOTSUPP, no load). */
static inline __attribute__((always_inline)) long tramp_get_func_ret(void *ctx,
								     unsigned long long *value)
{
	unsigned long long at;

	asm volatile("%[at] = *(u64 *)(%[ctx] - 8)\n\t"
		     "%[at] &= 0xff\n\t"
		     "%[at] <<= 3\n\t"
		     "%[at] += %[ctx]\n\t"
		     "%[at] = *(u64 *)(%[at] + 0)\n\t"
		     "*(u64 *)(%[v] + 0) = %[at]"
		     : [at] "=&r"(at) : [ctx] "r"(ctx), [v] "r"(value) : "memory");
	return 0;
}

#include "btfgen.bpf.h" /* generated for --ctx trampoline */
char LICENSE[] SEC("license") = "GPL";

struct { __uint(type, 2 /* BPF_MAP_TYPE_ARRAY */); __uint(max_entries, 3 + MIX);
	__type(key, __u32); __type(value, struct btfgen_spec); } specs SEC(".maps");
__u64 cookies[3 + MIX] = { COOKIES };

#define NAME "/etc/passwd" /* fs's string argument */
const char name[] = NAME;
char hand_name[256];

/* Each function's trampoline frame: the word below the ctx (its slot count), then the slots.
 * 256 words past it, so that every index the count's low byte can give (the return slot's)
 * is inside the array for the verifier. */
__u64 frame6[1 + 256] = { 6, 1, 2, 3, 4, 5, 6 };
__u64 frame12[1 + 256] = { 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
__u64 frame_s[1 + 256] = { 2 };
SHARED_GLOBALS
LOOP_MACROS

/* The program's loop (as PROGRAM's LOOPED): each decode starts from a ctx pointer clang cannot
 * follow, so no slot read moves out of the loop. */
#define TLOOPED(name, frame, body) \
	SEC("tc") int name(void *skb) \
	{ \
		for (__u32 n = batch; n && can_loop; n--) { \
			void *ctx __attribute__((unused)) = &frame[1]; \
			asm volatile("" : "+r"(ctx) : : "memory"); \
			if (body) \
				failed++; \
		} \
		return failed; \
	}
#define TBATCHED(name, frame, prepare, body) \
	static long name##_body(__u64 i, void *c) \
	{ \
		void *ctx __attribute__((unused)) = &frame[1]; \
		asm volatile("" : "+r"(ctx) : : "memory"); \
		if (body) \
			failed++; \
		return 0; \
	} \
	SEC("tc") int name(void *skb) { prepare; bpf_loop(BATCH, name##_body, 0, 0); return failed; }

/* Hand-written: the record's header with the function's id, then each slot with the helper,
 * as a tracing_multi program must read them (its target is a placeholder: no typed ctx). */
#define HEAD(id) (rec.btf_id = (id), rec.kind = 0)
#define SLOT(n) ({ unsigned long long v_ = 0; \
		   bpf_get_func_arg(ctx, (n), &v_); hand.v[n] = v_; })
static __always_inline int hand6(void *ctx)
{
	SLOT(0); SLOT(1); SLOT(2); SLOT(3); SLOT(4); SLOT(5);
	return 0;
}
static __always_inline int hand12(void *ctx)
{
	hand6(ctx);
	SLOT(6); SLOT(7); SLOT(8); SLOT(9); SLOT(10); SLOT(11);
	return 0;
}
static __always_inline int hand_s(void *ctx)
{
	SLOT(0); SLOT(1);
	return bpf_probe_read_kernel_str(hand_name, sizeof(hand_name),
					 (void *)(unsigned long)hand.v[0]) != sizeof(NAME);
}
static __always_inline int hand_cookie(void *ctx, __u32 key, int twelve)
{
	__u64 head = BTFGEN_COOKIE_BTF_ID(cookies[key & 1]);

	__builtin_memcpy(&rec, &head, 8);
	return twelve ? hand12(ctx) : hand6(ctx);
}
/* What btfgen trace runs for a call its cookie puts on the slot image. */
static __always_inline int image(void *ctx, __u32 key)
{
	return btfgen_generic_decode_cookie(ctx, cookies[key], 0, &rec) != 0;
}
static __always_inline int generic(void *ctx, __u32 key)
{
	if (key >= 3 + MIX)
		return 1;
	return btfgen_generic_decode_by_cookie(ctx, 0, cookies[key], &specs, 0, &rec);
}

TLOOPED(tloop_empty, frame6, 0)
TLOOPED(tloop_image_f6, frame6, image(ctx, 0))
TLOOPED(tloop_function_f6, frame6, btfgen_entry_f6(ctx, &out6))
TLOOPED(tloop_hand_f6, frame6, (HEAD(BTFGEN_ID_f6), hand6(ctx)))
TLOOPED(tloop_cookiehand_f6, frame6, hand_cookie(ctx, 0, 0))
TLOOPED(tloop_image_f12, frame12, image(ctx, 1))
TLOOPED(tloop_function_f12, frame12, btfgen_entry_f12(ctx, &out12))
TLOOPED(tloop_hand_f12, frame12, (HEAD(BTFGEN_ID_f12), hand12(ctx)))
TLOOPED(tloop_cookiehand_f12, frame12, hand_cookie(ctx, 1, 1))
TBATCHED(tempty, frame_s, , 0)
TBATCHED(tgeneric_fs, frame_s, frame_s[1] = (unsigned long)name, generic(ctx, 2))
TBATCHED(thand_fs, frame_s, frame_s[1] = (unsigned long)name, (HEAD(BTFGEN_ID_fs), hand_s(ctx)))
"""
FUNCTIONS = ("f6", "f12", "fs")  # the specs map's keys, in order
KINDS = ("generic", "spec", "given", "straight", "interpreter", "function", "hand", "table")
# In the program's own loop (LOOPED): f6's, whose decoders make no helper call.
LOOP_NAMES = ("loop_empty", "loop_image_f6", "loop_straight_f6", "loop_function_f6",
              "loop_hand_f6", "loop_cookiehand_f6")
MIX_NAMES = ("empty_mix", "generic_mix", "spec_mix", "interpreter_mix")
# fs: no per-function decoder (its capture is another header function) and no decoder alone
# (a capture's step runs on the spec's op, so it needs the spec).
KINDS_FS = ("generic", "interpreter", "hand", "table")


def ns_per_run(obj, name: str, repeat: int) -> tuple[float, int]:
    from bpfrun import BpfError, lib

    from btfgen.probe.libbpf import TestRunOpts

    packet = ctypes.create_string_buffer(64)  # an Ethernet header's worth: tc's minimum
    opts = TestRunOpts(sz=ctypes.sizeof(TestRunOpts), data_in=ctypes.addressof(packet),
                       data_size_in=64, repeat=repeat)
    if lib().bpf_prog_test_run_opts(obj.prog_fd(name), ctypes.byref(opts)):
        raise BpfError(f"BPF_PROG_TEST_RUN {name}: errno {ctypes.get_errno()}")
    return float(opts.duration), ctypes.c_int32(opts.retval).value


def best_of(obj, names: list[str], runs: int, repeat: int) -> dict[str, float]:
    """Each program's best ns a run over `runs` rounds, interleaved so that a busy moment hits
    all alike; a program returning non-zero (a failed decode or read) ends the benchmark. Each
    runs once untimed first: the first program timed on a cold machine was the loop's empty
    one, and every loop figure taken from it read low."""
    best = {n: float("inf") for n in names}
    for n in names:
        ns_per_run(obj, n, max(1, repeat // 10))
    for _ in range(runs):
        for n in names:
            d, ret = ns_per_run(obj, n, repeat)
            if ret != 0:
                raise SystemExit(f"{n} returned {ret}: a read failed")
            best[n] = min(best[n], d)
    return best


MIX = 256  # the running kernel's functions the mix decodes in turn


def entry_plan(spec: bytes) -> int:
    from btfgen.probe.spec_format import read_head

    return read_head(spec, "little")["entry_plan"]


def kernel_plans():
    """The running kernel's layout and generic plans, for the program to hold all their
    decoders and the mix to take its functions from."""
    import btfgen
    from btfgen.btf.reader import DEFAULT_PATH
    from btfgen.codegen.outputs import plans

    layout = btfgen.open(DEFAULT_PATH, arch="x86_64").place()
    return layout, plans(layout)


def mix_specs(layout, table) -> list[bytes]:
    """The specs of MIX of the kernel's functions, every n-th one, numbered by the program's
    table: what a mass-attach program finds for its calls."""
    from dataclasses import replace

    from btfgen.codegen.outputs import plans, python_module

    step = max(1, len(layout.functions) // MIX)
    some = replace(layout, functions=layout.functions[::step][:MIX])
    ns: dict = {}
    exec(compile(python_module(some, plans(some), {}, table=table), "mix.py", "exec"), ns)
    return [ns["spec"](f.name) for f in some.functions]


def build(tmp: Path, batch: int, kernel):
    from btfgen.abi.arches import load_arch
    from btfgen.cheader import load_headers
    from btfgen.codegen import straight
    from btfgen.codegen.outputs import generate, plan_table, plans, python_module
    from btfgen.probe import spec_format
    from btfgen.place import place_functions
    from btfgen.typed.capture import for_options

    more_plans = kernel[1] if kernel else []
    (tmp / "f.h").write_text(HEADER)
    types = load_headers([str(tmp / "f.h")], arch="x86_64")
    funcs = [f for name in FUNCTIONS for f in types.find_funcs(name)]
    layout = place_functions(types, load_arch("x86_64", 8), funcs)
    captures, _ = for_options(funcs, [], strings=True)  # fs's string, as trace's default
    out = generate(layout, types, ("bpf", "python"), self_contained=True,
                   captures=captures, more_plans=tuple(more_plans))
    (tmp / "btfgen.bpf.h").write_text(out["btfgen.bpf.h"])
    (tmp / "b.bpf.c").write_text(_text(PROGRAM))
    ns: dict = {}
    own = plans(layout, captures)
    table = plan_table(layout, own, more_plans)
    exec(compile(python_module(layout, own, captures, table=table), "btfgen_x86_64.py", "exec"),
         ns)
    specs = [ns["spec"](name) for name in FUNCTIONS]
    mix = mix_specs(kernel[0], table) if kernel else [specs[0]]
    numbers = [f"-DPLAN_{name}={entry_plan(s)}" for name, s in zip(("F6", "F12"), specs)]
    cookies = [spec_format.cookie(k, s, "little") for k, s in enumerate(specs + mix)]
    numbers.append("-DCOOKIES=" + ", ".join(f"{c}ULL" for c in cookies))
    t = time.perf_counter()
    subprocess.run(["clang-19", "-target", "bpfel", "-O2", "-g", "-Wall", "-Werror",
                    f"-DBATCH={batch}", f"-DMIX={len(mix)}", "-D__TARGET_ARCH_x86", *numbers,
                    "-I", str(tmp), "-c",
                    str(tmp / "b.bpf.c"), "-o", str(tmp / "b.bpf.o")], check=True)
    compile_s = time.perf_counter() - t
    on_image = sum(entry_plan(s) == 1 for s in mix)  # the register image's number
    return tmp / "b.bpf.o", specs + mix, straight.counts(table), compile_s, on_image


def kernel_tramp_plans():
    """The running kernel's generic plans for the trampoline's slots: the straight-line decoders
    a trampoline program for the whole kernel holds (with the slot read inlined, they made it
    overrun a BPF jump's range)."""
    import btfgen
    from btfgen.btf.reader import DEFAULT_PATH
    from btfgen.codegen.outputs import plans

    return plans(btfgen.open(DEFAULT_PATH, arch="x86_64", ctx="trampoline").place())


# The header's slot reads, built as `btfgen trace` builds its trampoline programs (BPF cpu v4):
# every one inlined (btfgen_tramp_slot is __always_inline there). The benchmark's variants:
# "call", the header built without -mcpu=v4 and every read a BPF-to-BPF call of
# btfgen_tramp_slot (__noinline there), the register image's too; "v1", the header built
# without -mcpu=v4 as it is (the register image's reads inlined, the others calls: a whole
# kernel's decoders with every read inlined overran a 16-bit jump before v4's gotol).
NOINLINE_SLOT = "static __noinline __u64 btfgen_tramp_slot("
IMAGE_ARG = "#define BTFGEN_IMAGE_ARG(ctx, off, type) ((type)btfgen_tramp_arg("
IMAGE_LOAD = "#define BTFGEN_IMAGE_LOAD(ctx, off, type) ((type)btfgen_tramp_slot_inline("
VARIANTS = {"call": [(IMAGE_ARG, IMAGE_ARG.replace("_arg(", "_slot(")),
                     (IMAGE_LOAD, IMAGE_LOAD.replace("_slot_inline(", "_slot("))],
            "v1": []}
CPU_V4 = ["-mcpu=v4"]  # as btfgen/trace/build.py builds the trampoline's programs


def _text(program: str) -> str:
    return program.replace("SHARED_GLOBALS", SHARED_GLOBALS).replace("LOOP_MACROS", LOOP_MACROS)


def build_tramp(tmp: Path, batch: int, more_plans, variant: str = ""):
    """The trampoline's program (PROGRAM_TRAMP) over a header generated for --ctx trampoline,
    as generated or as VARIANTS[variant] changes it. Returns the object, the specs (f6, f12,
    fs) in the map's order, and "" (or None, the specs, and the compiler's error line)."""
    from btfgen.abi.arches import load_arch
    from btfgen.cheader import load_headers
    from btfgen.codegen.outputs import generate, plan_table, plans, python_module
    from btfgen.place import place_functions
    from btfgen.probe import spec_format
    from btfgen.typed.capture import for_options

    (tmp / "f.h").write_text(HEADER)
    types = load_headers([str(tmp / "f.h")], arch="x86_64")
    funcs = [f for name in FUNCTIONS for f in types.find_funcs(name)]
    layout = place_functions(types, load_arch("x86_64", 8), funcs, ctx="trampoline")
    captures, _ = for_options(funcs, [], strings=True)
    header = generate(layout, types, ("bpf",), self_contained=True, captures=captures,
                      more_plans=tuple(more_plans))["btfgen.bpf.h"]
    for text in (NOINLINE_SLOT, IMAGE_ARG, IMAGE_LOAD):
        if text not in header:
            raise SystemExit(f"the trampoline header has no {text!r}: the benchmark is stale")
    for old, new in VARIANTS.get(variant, ()):
        header = header.replace(old, new)
    (tmp / "btfgen.bpf.h").write_text(header)
    (tmp / "t.bpf.c").write_text(_text(PROGRAM_TRAMP))
    ns: dict = {}
    own = plans(layout, captures)
    table = plan_table(layout, own, more_plans)
    exec(compile(python_module(layout, own, captures, table=table), "tramp.py", "exec"), ns)
    specs = [ns["spec"](name) for name in FUNCTIONS]
    cookies = [spec_format.cookie(k, s, "little") for k, s in enumerate(specs)]
    if not all(spec_format.read_head(s, "little")["entry_plan"] == 1 for s in specs[:2]):
        raise SystemExit("f6 and f12 are not on the trampoline's slot image")
    out = tmp / "t.bpf.o"
    done = subprocess.run(
        ["clang-19", "-target", "bpfel", "-O2", "-g", "-Wall", "-Werror", f"-DBATCH={batch}",
         *([] if variant in VARIANTS else CPU_V4), "-DMIX=1", "-D__TARGET_ARCH_x86", "-DCOOKIES=" + ", ".join(f"{c}ULL" for c in cookies),
         "-I", str(tmp), "-c", str(tmp / "t.bpf.c"), "-o", str(out)],
        capture_output=True, text=True)
    if done.returncode:
        lines = [l for l in done.stderr.splitlines() if "error" in l]
        return None, specs, (lines or done.stderr.splitlines() or ["clang failed"])[-1]
    return out, specs, ""


def _release() -> tuple[int, int]:
    major, minor = (platform.release().split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _ratio(g: float, h: float) -> str:
    return f"{g / h:.2f}x" if h > 0 else "none (hand-written not above the empty loop)"


def machine() -> str:
    """What f12's ratio depends on from one machine to the next: its hand-written decoder is
    mostly one bpf_probe_read_kernel, a helper call whose cost is the CPU's and its
    mitigations' (a `ret` through the Safe RET thunk, an indirect call through a retpoline),
    where generic adds a fixed number of instructions to it."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    said = []
    for v in ("spec_rstack_overflow", "retbleed", "spectre_v2"):
        try:
            text = Path(f"/sys/devices/system/cpu/vulnerabilities/{v}").read_text().strip()
        except OSError:
            continue
        said.append(f"{v}: {text.split(';')[0]}")
    return f"{model}, Linux {platform.release()}; " + "; ".join(said)


def baseline(name: str) -> str:
    """The empty program a program's figure is taken from: its own loop, or callbacks."""
    if name.startswith("loop_"):
        return "loop_empty"
    return "empty_mix" if name.endswith("_mix") else "empty"


TRAMP_NAMES = ("tloop_empty", "tloop_image_f6", "tloop_function_f6", "tloop_hand_f6",
               "tloop_cookiehand_f6", "tloop_image_f12", "tloop_function_f12", "tloop_hand_f12",
               "tloop_cookiehand_f12", "tempty", "tgeneric_fs", "thand_fs")


def tramp_rows(args, kernel_tramp) -> None:
    """The trampoline ctx's rows: as generated and in VARIANTS, each load of each object in
    turn (so that a busy moment hits them alike), the median of --loads."""
    from bpfrun import BpfObject

    load0 = os.getloadavg()[0]
    objs, refused = {}, {}
    with tempfile.TemporaryDirectory() as t:
        for variant in ("", *VARIANTS):
            d = Path(t) / (variant or "generated")
            d.mkdir()
            obj, specs, err = build_tramp(d, args.batch, kernel_tramp or (), variant)
            if obj is None and not variant:
                raise SystemExit(f"the trampoline program does not compile: {err}")
            if obj is None:
                refused[variant] = err
            else:
                objs[variant] = obj
        per_load: dict[str, list[dict]] = {v: [] for v in objs}
        for _ in range(args.loads):
            for variant, obj_path in objs.items():
                with BpfObject(obj_path) as obj:
                    obj.fill_array("specs", specs + [specs[0]])  # MIX=1: one more key
                    best = best_of(obj, list(TRAMP_NAMES), args.runs, args.repeat)
                per_load[variant].append({
                    n: (best[n] - best["tloop_empty" if n.startswith("tloop") else "tempty"])
                    / args.batch for n in TRAMP_NAMES})
    fig = {v: {n: statistics.median(p[n] for p in loads) for n in TRAMP_NAMES}
           for v, loads in per_load.items()}
    held = "the running kernel's and the three functions'" if kernel_tramp else \
        "the three functions'"
    print()
    print(f"trampoline ctx (--ctx trampoline; {held} straight-line decoders): the slot array in "
          "memory as the program's ctx, bpf_get_func_arg/_ret/_arg_cnt as the verifier inlines "
          f"them in a tracing program (the same instructions in asm); host load {load0:.2f} "
          f"before, {os.getloadavg()[0]:.2f} after")
    f = fig[""]
    for fn in ("f6", "f12"):
        g, h, ck = (f[f"tloop_{k}_{fn}"] for k in ("image", "hand", "cookiehand"))
        ratios = [p[f"tloop_image_{fn}"] / p[f"tloop_hand_{fn}"] for p in per_load[""]
                  if p[f"tloop_hand_{fn}"] > 0]
        print(f"  {fn} ({'6' if fn == 'f6' else '12'} slots), decoded in the program's own loop: "
              f"generic {g:6.2f} ns (its slot image), per-function "
              f"{f[f'tloop_function_{fn}']:6.2f} ns, hand-written {h:6.2f} ns, its id from the "
              f"cookie {ck:6.2f} ns; generic/hand {_ratio(g, h)} (each load "
              f"{min(ratios, default=0):.2f}-{max(ratios, default=0):.2f}) [goal <= 1.3x: "
              f"{'ok' if h > 0 and g <= 1.3 * h else 'MISSED'}]; generic - hand {g - h:.2f} ns")
    g, h = f["tgeneric_fs"], f["thand_fs"]
    print(f"  fs (2 slots and a captured string), a decode a callback: generic {g:6.2f} ns (by "
          f"its spec), hand-written {h:6.2f} ns; generic/hand {_ratio(g, h)}")
    for variant, what in (("call", "without -mcpu=v4, every slot read a BPF-to-BPF call "
                                   "(btfgen_tramp_slot, not inlined), the image's too"),
                          ("v1", "without -mcpu=v4 (the image's reads inlined, the others a "
                                 "call each)")):
        if variant in refused:
            print(f"  {what}: does not build: {refused[variant]}")
            continue
        v = fig[variant]
        print(f"  {what}: generic f6 {v['tloop_image_f6']:6.2f} ns, f12 "
              f"{v['tloop_image_f12']:6.2f} ns, fs {v['tgeneric_fs']:6.2f} ns; per-function f6 "
              f"{v['tloop_function_f6']:6.2f} ns, f12 {v['tloop_function_f12']:6.2f} ns; "
              f"hand-written f6 {v['tloop_hand_f6']:6.2f} ns, f12 {v['tloop_hand_f12']:6.2f} ns, "
              f"fs {v['thand_fs']:6.2f} ns")
    print("  from one load to the next (max - min), as generated: " + ", ".join(
        f"{n} {max(p[n] for p in per_load['']) - min(p[n] for p in per_load['']):.2f}"
        for n in TRAMP_NAMES if "empty" not in n))


def pt_regs_rows(args) -> None:
    """The pt_regs ctx's rows (the kprobe path's)."""
    from bpfrun import BpfObject

    kernel = None if args.no_kernel else kernel_plans()
    with tempfile.TemporaryDirectory() as t:
        obj_path, specs, counted, compile_s, on_image = build(Path(t), args.batch, kernel)
        if any(entry_plan(s) == 0 for s in specs[:len(FUNCTIONS)]):
            raise SystemExit("a benchmark spec has no straight-line decoder")
        names = (["empty"] + list(LOOP_NAMES)
                 + [f"{k}_{f}" for f in ("f6", "f12") for k in KINDS if k != "given"]
                 + ["given_f6", "given_f12", "cookiehand_f6"] + [f"{k}_fs" for k in KINDS_FS]
                 + (list(MIX_NAMES) if kernel else []))
        per_load: list[dict] = []
        load_s = []
        for _ in range(args.loads):
            t0 = time.perf_counter()
            with BpfObject(obj_path) as obj:
                load_s.append(time.perf_counter() - t0)
                obj.fill_array("specs", specs)
                best = best_of(obj, names, args.runs, args.repeat)
                per_load.append({n: (best[n] - best[baseline(n)]) / args.batch
                                 for n in names})
    # Each load places the programs' code anew, which moves sub-nanosecond figures by a
    # nanosecond or two: the median of the loads' best.
    figure = {n: statistics.median(p[n] for p in per_load) for n in names}
    spread = {n: max(p[n] for p in per_load) - min(p[n] for p in per_load) for n in names}
    held = "the running kernel's and the three functions'" if kernel else "the three functions'"
    print(f"program: {held} straight-line decoders ({counted}); clang {compile_s:.1f} s, "
          f"load (verifier, all programs) {min(load_s):.2f} s")
    print(f"machine: {machine()}")
    print(f"BPF_PROG_TEST_RUN, repeat {args.repeat}, {args.batch} decodes a run, best of "
          f"{args.runs} per load, median of {args.loads} loads (the empty loop subtracted); "
          f"load {os.getloadavg()[0]:.2f} on {len(os.sched_getaffinity(0))} CPUs")
    g, st, p, h, ck = (figure[f"loop_{k}_f6"] for k in
                       ("image", "straight", "function", "hand", "cookiehand"))
    ratios = [load["loop_image_f6"] / load["loop_hand_f6"] for load in per_load
              if load["loop_hand_f6"] > 0]
    print(f"  f6 (6 scalars in registers), decoded in the program's own loop: generic {g:6.2f} ns "
          f"(on the register image, as btfgen trace decodes it; its decoder alone {st:6.2f}), "
          f"per-function {p:6.2f} ns, hand-written {h:6.2f} ns, its id from the cookie "
          f"{ck:6.2f} ns; generic/hand {_ratio(g, h)} (each load: "
          f"{min(ratios, default=0):.2f}-{max(ratios, default=0):.2f}) [goal <= 1.3x: "
          f"{'ok' if h > 0 and g <= 1.3 * h else 'MISSED'}]")
    for f, what in (("f6", "6 scalars in registers"), ("f12", "12 arguments, 6 on the stack")):
        g, sp, gv, st, i, p, h, tb = (figure[f"{k}_{f}"] for k in KINDS)
        ck = (f", its id from the cookie {figure['cookiehand_f6']:6.2f} ns" if f == "f6"
              else "")
        # f6's goal is the loop's: in a callback each, its frame is the difference (above).
        goal = ("" if f == "f6" else
                f" [goal <= 1.3x: {'ok' if h > 0 and g <= 1.3 * h else 'MISSED'}]")
        print(f"  {f} ({what}), a decode a callback: generic {g:6.2f} ns (by its spec "
              f"{sp:6.2f}, its spec in hand {gv:6.2f}, its decoder alone {st:6.2f}, interpreter "
              f"{i:6.2f}), per-function {p:6.2f} ns, hand-written {h:6.2f} ns{ck}, through a "
              f"table {tb:6.2f} ns; generic/hand {_ratio(g, h)}{goal}, generic/table "
              f"{g / tb:.2f}x; generic - hand {g - h:.2f} ns"
              + (f" (hand-written f12 - f6, its stack's one bpf_probe_read_kernel: "
                 f"{h - figure['hand_f6']:.2f} ns)" if f == "f12" else ""))
    g, i, h, tb = (figure[f"{k}_fs"] for k in KINDS_FS)
    print(f"  fs (a register and a captured string): generic {g:6.2f} ns (interpreter "
          f"{i:6.2f}), hand-written {h:6.2f} ns, through a table {tb:6.2f} ns; generic/hand "
          f"{g / h:.2f}x")
    if kernel:
        print(f"  a mix of {MIX} of the kernel's functions in a pseudo-random order ({on_image} on "
              f"the register image): generic {figure['generic_mix']:6.2f} ns, by its spec "
              f"{figure['spec_mix']:6.2f} ns, interpreter {figure['interpreter_mix']:6.2f} ns "
              "a decode")
    print("  from one load to the next (max - min): " + ", ".join(
        f"{n} {spread[n]:.2f}" for n in names if n.removeprefix("loop_").split("_")[0] in
        ("image", "generic", "spec", "given", "hand", "cookiehand", "table")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="decodes per run")
    ap.add_argument("--loads", type=int, default=5,
                    help="loads of the program (each places its code anew): the median is shown")
    ap.add_argument("--no-kernel", action="store_true",
                    help="only the two functions' decoders in the program, and no plan counts")
    ap.add_argument("--ctx", choices=("pt_regs", "trampoline", "both"), default="both",
                    help="the contexts timed (default: both)")
    args = ap.parse_args()
    from bpfrun import bpf_permitted

    reason = bpf_permitted()
    if not reason and platform.machine() != "x86_64":
        reason = "not an x86_64 machine"
    if not reason and _release() < (6, 9):
        reason = f"Linux {platform.release()}: the programs' own loops need may_goto (6.9)"
    if reason:
        print(f"skipped: {reason}")
        return 0
    if args.ctx != "trampoline":
        pt_regs_rows(args)
    if args.ctx != "pt_regs":
        tramp_rows(args, None if args.no_kernel else kernel_tramp_plans())
    if not args.no_kernel:
        import bench_plans

        print()
        bench_plans.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
