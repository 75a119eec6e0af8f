// SPDX-License-Identifier: GPL-2.0-only
/*
 * What btfgen's generated decode adds to an fprobe entry handler, against a hand-written one
 * (benchmarks/bench_fprobe.py drives it; docs/benchmarks.md has the figures).
 *
 *   insmod btfgen_fprobe_bench.ko func=__sys_sendto [handler=N]
 *   echo N > /sys/module/btfgen_fprobe_bench/parameters/handler     # switched while loaded
 *
 * One fprobe, entry only, on `func` (__sys_sendto: six register arguments; do_mmap: six in
 * registers and three on the stack on x86_64). `handler` picks what the entry handler does:
 *   0  nothing but count the call (the baseline: fprobe's own cost);
 *   1  hand-written: each argument read with the kernel's accessors, ftrace_regs_get_argument()
 *      and, for the stack ones, ftrace_regs_get_kernel_stack_nth(), into a typed struct;
 *   2  btfgen's generated per-function decoder (btfgen_entry_<func>) into its typed struct;
 *   3  btfgen's generic decoder: btfgen_spec_by_ip(ip) and btfgen_generic_entry() into a
 *      struct btfgen_record (what the example module sends).
 * Every handler counts its calls (`hits`, read from /sys/module/.../parameters/hits) and
 * writes what it read to memory of its CPU, so nothing it reads can be left out by the compiler.
 * One entry function a probed function switches on `handler` (read once a call) and runs the
 * handler inline: each handler pays the same switch, and the benchmark alternates the handlers
 * without reloading the module.
 */
#include <linux/module.h>
#include <linux/fprobe.h>
#include <linux/ftrace.h>
#include <linux/vmalloc.h>
#include <linux/overflow.h>
#include <linux/smp.h>
#include <linux/timekeeping.h>
#include <linux/moduleparam.h>

#include "btfgen.kernel.h"

static char *func = "__sys_sendto";
module_param(func, charp, 0444);
MODULE_PARM_DESC(func, "__sys_sendto or do_mmap");
static int handler;
module_param(handler, int, 0644);
MODULE_PARM_DESC(handler, "0 empty, 1 hand-written, 2 generated per function, 3 generated generic");
static unsigned long hits;
module_param(hits, ulong, 0644);
MODULE_PARM_DESC(hits, "calls the handler ran for (writable: set to 0 between runs)");
/* With `timed` set, each call's handler is timed inside the kernel (ktime_get_ns() before and
 * after: the empty handler's time is the clock's own) into `hist`: HIST_NS-wide buckets, the
 * last one everything longer. Per-call times want no loop around them, and the host's
 * interruptions of the emulator (a guest on shared CPUs) land in few buckets, not in every
 * call's average. */
static int timed;
module_param(timed, int, 0644);
MODULE_PARM_DESC(timed, "1: time each handler into hist (cumulative: read it before and after)");
#define HIST_NS 4
#define HIST_BUCKETS 512
static unsigned long hist[HIST_BUCKETS];
static int hist_n = HIST_BUCKETS;
module_param_array(hist, ulong, &hist_n, 0644);
MODULE_PARM_DESC(hist, "calls by the handler's time, 4 ns a bucket (the last: longer)");
static unsigned long faults;
module_param(faults, ulong, 0644);
MODULE_PARM_DESC(faults, "calls whose decode said a read failed");

/* What each handler writes: one of these a CPU. */
struct sink {
	union {
		struct btfgen_args___sys_sendto sendto;
		struct btfgen_args_do_mmap mmap;
		u64 words[16];
	};
	struct btfgen_record rec; /* the generic decoder's */
};
static struct sink *sinks;

static struct sink *sink(void)
{
	return &sinks[smp_processor_id()];
}

static __always_inline int empty(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		 struct ftrace_regs *fregs, void *data)
{
	hits++;
	return 0;
}

/* Hand-written, as one would without btfgen: the kernel's accessors, the prototype's types. */
static __always_inline int hand_sendto(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		       struct ftrace_regs *fregs, void *data)
{
	struct btfgen_args___sys_sendto *a = &sink()->sendto;

	a->fd = (int)ftrace_regs_get_argument(fregs, 0);
	a->buff = (void *)ftrace_regs_get_argument(fregs, 1);
	a->len = (size_t)ftrace_regs_get_argument(fregs, 2);
	a->flags = (unsigned int)ftrace_regs_get_argument(fregs, 3);
	a->addr = (struct sockaddr *)ftrace_regs_get_argument(fregs, 4);
	a->addr_len = (int)ftrace_regs_get_argument(fregs, 5);
	hits++;
	return 0;
}

static __always_inline int hand_mmap(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		     struct ftrace_regs *fregs, void *data)
{
	struct btfgen_args_do_mmap *a = &sink()->mmap;

	a->file = (struct file *)ftrace_regs_get_argument(fregs, 0);
	a->addr = ftrace_regs_get_argument(fregs, 1);
	a->len = ftrace_regs_get_argument(fregs, 2);
	a->prot = ftrace_regs_get_argument(fregs, 3);
	a->flags = ftrace_regs_get_argument(fregs, 4);
	a->vm_flags = ftrace_regs_get_argument(fregs, 5);
	/* at entry the stack pointer points at the return address: the 7th argument is above it */
	a->pgoff = ftrace_regs_get_kernel_stack_nth(fregs, 1);
	a->populate = (u64 *)ftrace_regs_get_kernel_stack_nth(fregs, 2);
	a->uf = (struct list_head *)ftrace_regs_get_kernel_stack_nth(fregs, 3);
	hits++;
	return 0;
}

static __always_inline int gen_sendto(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		      struct ftrace_regs *fregs, void *data)
{
	if (btfgen_entry___sys_sendto(fregs, &sink()->sendto))
		faults++;
	hits++;
	return 0;
}

static __always_inline int gen_mmap(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	if (btfgen_entry_do_mmap(fregs, &sink()->mmap))
		faults++;
	hits++;
	return 0;
}

static __always_inline int generic(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		   struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);

	if (spec && btfgen_generic_entry(fregs, spec, &sink()->rec, NULL, 0))
		faults++;
	hits++;
	return 0;
}

#define ENTRY(NAME, HAND, GEN) \
static __always_inline void NAME##_run(int h, struct fprobe *fp, unsigned long ip, \
				       unsigned long ret_ip, struct ftrace_regs *fregs, void *data) \
{ \
	switch (h) { \
	case 1: HAND(fp, ip, ret_ip, fregs, data); break; \
	case 2: GEN(fp, ip, ret_ip, fregs, data); break; \
	case 3: generic(fp, ip, ret_ip, fregs, data); break; \
	default: empty(fp, ip, ret_ip, fregs, data); break; \
	} \
} \
static int NAME(struct fprobe *fp, unsigned long ip, unsigned long ret_ip, \
		struct ftrace_regs *fregs, void *data) \
{ \
	int h = READ_ONCE(handler); \
	u64 t0, t; \
\
	if (!READ_ONCE(timed)) { \
		NAME##_run(h, fp, ip, ret_ip, fregs, data); \
		return 0; \
	} \
	t0 = ktime_get_ns(); \
	NAME##_run(h, fp, ip, ret_ip, fregs, data); \
	t = (ktime_get_ns() - t0) / HIST_NS; \
	hist[min_t(u64, t, HIST_BUCKETS - 1)]++; \
	return 0; \
}
ENTRY(entry_sendto, hand_sendto, gen_sendto)
ENTRY(entry_mmap, hand_mmap, gen_mmap)

static struct fprobe probe;

static int __init bench_init(void)
{
	bool mmap = !strcmp(func, "do_mmap");
	int err;

	if (!mmap && strcmp(func, "__sys_sendto"))
		return -EINVAL;
	probe.entry_handler = mmap ? entry_mmap : entry_sendto;
	sinks = vzalloc(array_size(nr_cpu_ids, sizeof(*sinks)));
	if (!sinks)
		return -ENOMEM;
	btfgen_spec_cache_init();
	err = register_fprobe(&probe, func, NULL);
	if (err) {
		vfree(sinks);
		return err;
	}
	return 0;
}

static void __exit bench_exit(void)
{
	unregister_fprobe(&probe);
	synchronize_rcu();
	vfree(sinks);
}

module_init(bench_init);
module_exit(bench_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen's generated decode against a hand-written fprobe handler, per call");
