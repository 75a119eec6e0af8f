// SPDX-License-Identifier: GPL-2.0-only
/*
 * One fprobe on every function a glob matches, decoded by btfgen's generated kernel header:
 * each call's arguments at entry, its return value at exit (with what the exit needs of the
 * entry kept in the fprobe's entry_data), as btfgen records in a ring that user space reads
 * from /proc/btfgen_fprobe (README.md: why a ring of its own and a proc file).
 *
 *   insmod btfgen_fprobe.ko filter='vfs_*' [notfilter='vfs_fsync*'] [ring_kb=16384]
 *   (or without filter, then: cat names.txt > /proc/btfgen_fprobe_functions)
 *   python3 btfgen_fprobe_record.py gen/ out.btfrec     # until interrupted
 *   rmmod btfgen_fprobe; btfgen decode out.btfrec
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt
#include <linux/module.h>
#include <linux/fprobe.h>

#define BTFGEN_GENERIC_ONLY /* one handler for every function: the table, not per-function code */
#include "btfgen.kernel.h"
#define BTFGEN_RING_NAME "btfgen_fprobe"
#include "btfgen_ring.h" /* examples/common: the ring, the proc files */

static char *filter;
module_param(filter, charp, 0444);
MODULE_PARM_DESC(filter, "the functions to probe (a glob); without it, the names written to "
		 "/proc/btfgen_fprobe_functions (one a line), probed once the file is closed");
static char *notfilter;
module_param(notfilter, charp, 0444);
MODULE_PARM_DESC(notfilter, "functions the filter matches to leave out (a glob)");
static unsigned int ring_kb = 16384;
module_param(ring_kb, uint, 0444);
MODULE_PARM_DESC(ring_kb, "the ring's size in KiB (rounded up to a power of two)");

static atomic64_t unknown;

static int on_entry(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);
	struct event *ev;

	if (ring_ignored())
		return 1;
	if (!spec) {
		atomic64_inc(&unknown);
		return 1; /* not ours to decode: no exit either */
	}
	ev = ring_event();
	btfgen_generic_entry(fregs, spec, &ev->rec, data, BTFGEN_CARRY_SIZE);
	ring_send(ev, spec->entry_size);
	return 0;
}

static void on_exit(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);
	struct event *ev;

	if (!spec || READ_ONCE(stopping))
		return;
	ev = ring_event();
	btfgen_generic_exit(fregs, spec, &ev->rec, data, BTFGEN_CARRY_SIZE);
	ring_send(ev, spec->exit_size);
}

static struct fprobe probe = {
	.entry_handler = on_entry,
	.exit_handler = on_exit,
};

/* The names written to /proc/btfgen_fprobe_functions: one fprobe on the list. */
static int ring_probe_names(const char **names, int n)
{
	int err = register_fprobe_syms(&probe, names, n);

	return err ? err : n;
}

static void ring_stats_more(struct seq_file *m)
{
	seq_printf(m, "missed %lu\nunknown %lld\n", probe.nmissed, atomic64_read(&unknown));
}

static int __init btfgen_fprobe_init(void)
{
	int err = ring_setup(ring_kb);

	if (err)
		return err;
	probe.entry_data_size = BTFGEN_CARRY_SIZE;
	if (filter) {
		err = register_fprobe(&probe, filter, notfilter);
		if (err) {
			pr_err("register_fprobe(%s): %d\n", filter, err);
			ring_teardown();
			return err;
		}
		registered = true;
		pr_info("probing '%s' (%d functions in the table), ring %llu KiB\n",
			filter, BTFGEN_NSPECS, ring_size >> 10);
	}
	return 0;
}

static void __exit btfgen_fprobe_exit(void)
{
	/* No new entry runs after this; exits of calls still in flight find the probe gone and
	 * run nothing of ours (fprobe checks, and the module's text stays until RCU says every
	 * handler has left it). */
	ring_stop();
	if (registered)
		unregister_fprobe(&probe);
	pr_info("%lld events, %lld lost (ring full), %lu missed (fprobe)\n",
		atomic64_read(&events), atomic64_read(&lost), probe.nmissed);
	ring_teardown();
}

module_init(btfgen_fprobe_init);
module_exit(btfgen_fprobe_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen's generated decoders in an fprobe: every call's arguments and return value");
