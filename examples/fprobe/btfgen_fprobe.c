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
#include <linux/module.h>
#include <linux/fprobe.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/vmalloc.h>
#include <linux/overflow.h>
#include <linux/sched.h>
#include <linux/timekeeping.h>
#include <linux/spinlock.h>
#include <linux/atomic.h>
#include <linux/uaccess.h>
#include <linux/preempt.h>
#include <linux/log2.h>

#define BTFGEN_GENERIC_ONLY /* one handler for every function: the table, not per-function code */
#include "btfgen.kernel.h"

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

/* An event as btfgen's tracer sends it: its head, the record's head, the data its spec's
 * decoder writes (entry_size or exit_size). */
struct event {
	struct btfgen_event_head head;
	struct btfgen_record rec;
};

/* Where a call's event is made before it is copied into the ring: one per CPU and context
 * (task, softirq, irq, NMI), since a handler may be interrupted by another one. 33 KB a CPU,
 * more than alloc_percpu() gives: an array indexed by CPU. */
struct scratch {
	struct event ev[4];
};
static struct scratch *scratch;

/* The ring: records as in a BPF ring buffer (an 8-byte header holding the length, the bytes,
 * padding to 8), written whole under the lock, read whole by the proc file. */
static u8 *ring;
static u64 ring_size, head, tail;
static DEFINE_RAW_SPINLOCK(ring_lock);
static atomic64_t events, lost, unknown;
static atomic_t lost_since; /* a record was lost: the next one says so (BTFGEN_EVENT_SOME_LOST) */
static bool stopping; /* set before the probe goes: a handler still running sends nothing */
/* The process reading the records: its own calls are not recorded (its reads of the ring are
 * traced calls too, and each would make more to read). */
static pid_t reader_tgid = -1; /* -1: none (0 is the idle task's) */

static void ring_copy(u64 at, const void *from, u32 n)
{
	u64 off = at & (ring_size - 1);
	u32 first = min_t(u64, n, ring_size - off);

	memcpy(ring + off, from, first);
	memcpy(ring, (const u8 *)from + first, n - first);
}

static void send(struct event *ev, u32 data_size)
{
	u32 n = sizeof(ev->head) + offsetof(struct btfgen_record, data) + data_size;
	u32 whole = 8 + round_up(n, 8);
	u32 hdr[2] = { n, 0 };
	unsigned long flags;

	ev->head.flags = atomic_xchg(&lost_since, 0) ? BTFGEN_EVENT_SOME_LOST : 0;
	if (in_nmi()) {
		if (!raw_spin_trylock_irqsave(&ring_lock, flags))
			goto lost;
	} else {
		raw_spin_lock_irqsave(&ring_lock, flags);
	}
	if (head - tail + whole > ring_size) {
		raw_spin_unlock_irqrestore(&ring_lock, flags);
		goto lost;
	}
	ring_copy(head, hdr, 8);
	ring_copy(head + 8, ev, n);
	head += whole; /* the padding's bytes are whatever the ring held: never read */
	raw_spin_unlock_irqrestore(&ring_lock, flags);
	atomic64_inc(&events);
	return;
lost:
	atomic64_inc(&lost);
	atomic_set(&lost_since, 1);
}

static struct event *event_for(const struct btfgen_spec *spec)
{
	struct event *ev = &scratch[smp_processor_id()].ev[interrupt_context_level() & 3];

	ev->head.tgid = current->tgid;
	ev->head.pid = current->pid;
	memcpy(ev->head.comm, current->comm, sizeof(ev->head.comm));
	ev->head.ns = ktime_get_ns();
	ev->head.cpu = smp_processor_id();
	return ev;
}

static int on_entry(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);
	struct event *ev;

	if (READ_ONCE(stopping) || current->tgid == READ_ONCE(reader_tgid))
		return 1;
	if (!spec) {
		atomic64_inc(&unknown);
		return 1; /* not ours to decode: no exit either */
	}
	ev = event_for(spec);
	btfgen_generic_entry(fregs, spec, &ev->rec, data, BTFGEN_CARRY_SIZE);
	send(ev, spec->entry_size);
	return 0;
}

static void on_exit(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);
	struct event *ev;

	if (!spec || READ_ONCE(stopping))
		return;
	ev = event_for(spec);
	btfgen_generic_exit(fregs, spec, &ev->rec, data, BTFGEN_CARRY_SIZE);
	send(ev, spec->exit_size);
}

static struct fprobe probe = {
	.entry_handler = on_entry,
	.exit_handler = on_exit,
};

/* /proc/btfgen_fprobe: whole records, as many as fit the read (none: 0, read again later). */
#define BOUNCE (256 << 10)
static u8 *bounce;
static DEFINE_MUTEX(reader);

static ssize_t records_read(struct file *file, char __user *buf, size_t count, loff_t *pos)
{
	unsigned long flags;
	size_t n = 0;
	ssize_t ret;

	mutex_lock(&reader);
	raw_spin_lock_irqsave(&ring_lock, flags);
	while (tail + n < head) {
		u32 hdr[2], whole;
		u64 off = (tail + n) & (ring_size - 1);

		memcpy(hdr, ring + off, 4); /* a header never wraps: records are 8-aligned */
		whole = 8 + round_up(hdr[0], 8);
		if (n + whole > min_t(size_t, count, BOUNCE))
			break;
		n += whole;
	}
	if (n) {
		u64 off = tail & (ring_size - 1);
		size_t first = min_t(u64, n, ring_size - off);

		memcpy(bounce, ring + off, first);
		memcpy(bounce + first, ring, n - first);
		tail += n;
	}
	raw_spin_unlock_irqrestore(&ring_lock, flags);
	ret = n && copy_to_user(buf, bounce, n) ? -EFAULT : n;
	mutex_unlock(&reader);
	return ret;
}

static int records_open(struct inode *inode, struct file *file)
{
	WRITE_ONCE(reader_tgid, current->tgid);
	return 0;
}

static int records_release(struct inode *inode, struct file *file)
{
	WRITE_ONCE(reader_tgid, -1);
	return 0;
}

static const struct proc_ops records_ops = {
	.proc_open = records_open,
	.proc_release = records_release,
	.proc_read = records_read,
	.proc_lseek = noop_llseek,
};

/* /proc/btfgen_fprobe_functions: names to probe, one a line (a glob cannot name a list of
 * functions); registered with register_fprobe_syms() when the writer closes the file. */
#define NAMES_MAX (1 << 20)
static char *names_buf;
static size_t names_len;
static bool registered;
static int registered_err, registered_count;
static DEFINE_MUTEX(names_lock);

static ssize_t functions_write(struct file *file, const char __user *buf, size_t count,
			       loff_t *pos)
{
	ssize_t ret = count;

	mutex_lock(&names_lock);
	if (registered) {
		ret = -EBUSY;
	} else if (count > NAMES_MAX - 1 - names_len) {
		ret = -E2BIG;
	} else {
		if (!names_buf)
			names_buf = vzalloc(NAMES_MAX);
		if (!names_buf)
			ret = -ENOMEM;
		else if (copy_from_user(names_buf + names_len, buf, count))
			ret = -EFAULT;
		else
			names_len += count;
	}
	mutex_unlock(&names_lock);
	return ret;
}

static int functions_release(struct inode *inode, struct file *file)
{
	const char **syms = NULL;
	char *at, *line;
	int n = 0, err;

	mutex_lock(&names_lock);
	if (registered || !names_buf || !names_len)
		goto out;
	syms = kvcalloc(names_len / 2 + 1, sizeof(*syms), GFP_KERNEL);
	if (!syms) {
		registered_err = -ENOMEM;
		goto out;
	}
	names_buf[names_len] = 0;
	at = names_buf;
	while ((line = strsep(&at, "\n")))
		if (*line)
			syms[n++] = line;
	err = n ? register_fprobe_syms(&probe, syms, n) : -EINVAL;
	registered = !err;
	registered_err = err;
	registered_count = err ? 0 : n;
	if (err)
		pr_err("btfgen_fprobe: register_fprobe_syms(%d names): %d\n", n, err);
	else
		pr_info("btfgen_fprobe: probing %d functions (%d in the table)\n", n, BTFGEN_NSPECS);
out:
	kvfree(syms);
	vfree(names_buf);
	names_buf = NULL;
	names_len = 0;
	mutex_unlock(&names_lock);
	return 0;
}

static const struct proc_ops functions_ops = {
	.proc_write = functions_write,
	.proc_release = functions_release,
	.proc_lseek = noop_llseek,
};

/* /proc/btfgen_fprobe_stats: what was sent, what was lost and why. */
static int stats_show(struct seq_file *m, void *v)
{
	seq_printf(m, "events %lld\nlost %lld\nmissed %lu\nunknown %lld\nfunctions %d\n"
		   "probing %d\nerror %d\n",
		   atomic64_read(&events), atomic64_read(&lost), probe.nmissed,
		   atomic64_read(&unknown), BTFGEN_NSPECS, registered_count, registered_err);
	return 0;
}

static int __init btfgen_fprobe_init(void)
{
	int err;

	ring_size = roundup_pow_of_two((u64)max(ring_kb, 64U) << 10);
	ring = vzalloc(ring_size);
	bounce = vzalloc(BOUNCE);
	scratch = vzalloc(array_size(nr_cpu_ids, sizeof(*scratch)));
	if (!ring || !bounce || !scratch) {
		err = -ENOMEM;
		goto free;
	}
	btfgen_spec_cache_init();
	if (!proc_create("btfgen_fprobe", 0400, NULL, &records_ops) ||
	    !proc_create("btfgen_fprobe_functions", 0200, NULL, &functions_ops) ||
	    !proc_create_single("btfgen_fprobe_stats", 0444, NULL, stats_show)) {
		err = -ENOMEM;
		goto remove;
	}
	probe.entry_data_size = BTFGEN_CARRY_SIZE;
	if (filter) {
		err = register_fprobe(&probe, filter, notfilter);
		if (err) {
			pr_err("btfgen_fprobe: register_fprobe(%s): %d\n", filter, err);
			goto remove;
		}
		registered = true;
		pr_info("btfgen_fprobe: probing '%s' (%d functions in the table), ring %llu KiB\n",
			filter, BTFGEN_NSPECS, ring_size >> 10);
	}
	return 0;
remove:
	remove_proc_entry("btfgen_fprobe_stats", NULL);
	remove_proc_entry("btfgen_fprobe_functions", NULL);
	remove_proc_entry("btfgen_fprobe", NULL);
free:
	vfree(scratch);
	vfree(bounce);
	vfree(ring);
	return err;
}

static void __exit btfgen_fprobe_exit(void)
{
	/* No new entry runs after this; exits of calls still in flight find the probe gone and
	 * run nothing of ours (fprobe checks, and the module's text stays until RCU says every
	 * handler has left it). */
	WRITE_ONCE(stopping, true);
	if (registered)
		unregister_fprobe(&probe);
	/* handlers run with preemption off: once every CPU has been through a quiescent state,
	 * none is still inside one, and the ring can go */
	synchronize_rcu();
	remove_proc_entry("btfgen_fprobe_stats", NULL);
	remove_proc_entry("btfgen_fprobe_functions", NULL);
	remove_proc_entry("btfgen_fprobe", NULL);
	pr_info("btfgen_fprobe: %lld events, %lld lost (ring full), %lu missed (fprobe)\n",
		atomic64_read(&events), atomic64_read(&lost), probe.nmissed);
	vfree(scratch);
	vfree(bounce);
	vfree(ring);
}

module_init(btfgen_fprobe_init);
module_exit(btfgen_fprobe_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen's generated decoders in an fprobe: every call's arguments and return value");
