// SPDX-License-Identifier: GPL-2.0-only
/*
 * A kretprobe per function of a list, decoded by btfgen's generated kernel header over the
 * handlers' struct pt_regs (`btfgen --ctx pt_regs`): each call's arguments at entry (registers,
 * and the stack through the entry's stack pointer), its return value at exit (what the exit
 * needs of the entry kept in the kretprobe instance's data), as btfgen records in the ring the
 * fprobe example has (examples/common/btfgen_ring.h), read from /proc/btfgen_kprobe by the same
 * reader. For kernels without fprobe, or whose ftrace_regs hold no arguments (x86-32).
 *
 *   insmod btfgen_kprobe.ko functions=vfs_fallocate,shmem_fallocate [ring_kb=4096] [maxactive=N]
 *   (or without functions, then: cat names.txt > /proc/btfgen_kprobe_functions)
 *   python3 btfgen_fprobe_record.py --module btfgen_kprobe gen/ out.btfrec   # until interrupted
 *   rmmod btfgen_kprobe; btfgen decode out.btfrec
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt
#include <linux/module.h>
#include <linux/kprobes.h>
#include <linux/slab.h>
#include <linux/string.h>

#define BTFGEN_GENERIC_ONLY /* one pair of handlers for every function: the table */
#include "btfgen.kernel.h"
#define BTFGEN_RING_NAME "btfgen_kprobe"
#include "btfgen_ring.h" /* examples/common: the ring, the proc files */

static char *functions;
module_param(functions, charp, 0444);
MODULE_PARM_DESC(functions, "the functions to probe, comma-separated; without it, the names "
		 "written to /proc/btfgen_kprobe_functions (one a line), probed once it is closed");
static unsigned int ring_kb = 4096;
module_param(ring_kb, uint, 0444);
MODULE_PARM_DESC(ring_kb, "the ring's size in KiB (rounded up to a power of two)");
static int maxactive;
module_param(maxactive, int, 0444);
MODULE_PARM_DESC(maxactive, "calls of one function in flight at once (0: the kernel's "
		 "default); more are missed, and counted");

/* A function's kretprobe and the spec its handlers decode with: found by name once, when it
 * is registered (a kretprobe is on one function, unlike an fprobe's entry_ip). */
struct probe {
	struct kretprobe rp;
	const struct btfgen_spec *spec;
};
static struct probe *probes;
static struct kretprobe **rps; /* the registered ones, for unregister_kretprobes() */
static int nprobes;
static atomic64_t unknown; /* names not in the table: not probed */

static const struct btfgen_spec *spec_of(struct kretprobe_instance *ri)
{
	struct kretprobe *rp = get_kretprobe(ri);

	return rp ? container_of(rp, struct probe, rp)->spec : NULL;
}

static int on_entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	const struct btfgen_spec *spec = spec_of(ri);
	struct event *ev;

	if (!spec || ring_ignored())
		return 1; /* no exit either */
	ev = ring_event();
	btfgen_generic_entry(regs, spec, &ev->rec, ri->data, BTFGEN_CARRY_SIZE);
	ring_send(ev, spec->entry_size);
	return 0;
}

static int on_exit(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	const struct btfgen_spec *spec = spec_of(ri);
	struct event *ev;

	if (!spec || READ_ONCE(stopping))
		return 0;
	ev = ring_event();
	btfgen_generic_exit(regs, spec, &ev->rec, ri->data, BTFGEN_CARRY_SIZE);
	ring_send(ev, spec->exit_size);
	return 0;
}

/* A kretprobe on each name the table has (the others counted in `unknown`); a name the kernel
 * cannot probe is said and left out. -> the number probed; none: -EINVAL (insmod's "Invalid
 * parameters"; each name's reason is in dmesg, the first error in the stats). */
static int ring_probe_names(const char **names, int n)
{
	int i, err, first_err = 0;

	if (probes)
		return -EBUSY;
	probes = kcalloc(n, sizeof(*probes), GFP_KERNEL);
	rps = kcalloc(n, sizeof(*rps), GFP_KERNEL);
	if (!probes || !rps) {
		kfree(probes);
		kfree(rps);
		probes = NULL;
		rps = NULL;
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		struct probe *p = &probes[nprobes];
		const struct btfgen_spec *spec = btfgen_spec_by_name(names[i]);

		if (!spec) {
			atomic64_inc(&unknown);
			pr_warn("%s: not in btfgen's table (generate for it)\n", names[i]);
			continue;
		}
		memset(p, 0, sizeof(*p));
		p->spec = spec;
		p->rp.kp.symbol_name = kstrdup(names[i], GFP_KERNEL);
		if (!p->rp.kp.symbol_name) {
			err = -ENOMEM;
		} else {
			p->rp.entry_handler = on_entry;
			p->rp.handler = on_exit;
			p->rp.data_size = BTFGEN_CARRY_SIZE;
			p->rp.maxactive = maxactive;
			err = register_kretprobe(&p->rp);
		}
		if (err) {
			pr_warn("%s: register_kretprobe: %d\n", names[i], err);
			kfree(p->rp.kp.symbol_name);
			first_err = first_err ?: err;
			continue;
		}
		rps[nprobes++] = &p->rp;
	}
	if (!nprobes) {
		registered_err = first_err;
		return -EINVAL;
	}
	return nprobes;
}

static void ring_stats_more(struct seq_file *m)
{
	unsigned long missed = 0;
	int i;

	/* rp.nmissed: no instance free (maxactive); kp.nmissed: the kprobe itself skipped */
	for (i = 0; i < nprobes; i++)
		missed += READ_ONCE(probes[i].rp.nmissed) + READ_ONCE(probes[i].rp.kp.nmissed);
	seq_printf(m, "missed %lu\nunknown %lld\n", missed, atomic64_read(&unknown));
}

static int __init btfgen_kprobe_init(void)
{
	int err = ring_setup(ring_kb);
	char *text;

	if (err || !functions)
		return err;
	text = kstrdup(functions, GFP_KERNEL);
	err = text ? ring_probe_text(text, ",") : -ENOMEM;
	kfree(text);
	if (err < 0) {
		ring_teardown();
		return err;
	}
	pr_info("ring %llu KiB\n", ring_size >> 10);
	return 0;
}

static void __exit btfgen_kprobe_exit(void)
{
	int i;

	/* Handlers still running send nothing more; once unregistered, no handler runs again,
	 * and calls still in flight return through the kernel's trampoline without ours. */
	ring_stop();
	if (nprobes)
		unregister_kretprobes(rps, nprobes);
	pr_info("%lld events, %lld lost (ring full)\n", atomic64_read(&events),
		atomic64_read(&lost));
	for (i = 0; i < nprobes; i++)
		kfree(probes[i].rp.kp.symbol_name);
	kfree(rps);
	kfree(probes);
	ring_teardown();
}

module_init(btfgen_kprobe_init);
module_exit(btfgen_kprobe_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen's generated decoders in kretprobes: every call's arguments and return value");
