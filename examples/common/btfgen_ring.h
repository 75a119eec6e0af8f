/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What btfgen's example modules share (examples/fprobe, examples/kprobe): a ring of btfgen
 * records that user space reads from /proc/NAME, the names of the functions to probe written
 * to /proc/NAME_functions, and what was sent and lost in /proc/NAME_stats. The probes are the
 * module's own: it fills an event (ring_event()) with btfgen's generic decoder and sends it
 * (ring_send()). Records are laid out as in a BPF ring buffer (an 8-byte header holding the
 * length, the event, padding to 8), so one reader (examples/fprobe/btfgen_fprobe_record.py)
 * hands them to btfgen's recording writer unchanged, whichever module made them.
 *
 * Included once, by the module's one C file, after btfgen.kernel.h, with BTFGEN_RING_NAME
 * defined ("btfgen_fprobe"); the module defines, before including it:
 *   static int ring_probe_names(const char **names, int n);  probe these (the list written to
 *        NAME_functions, once its writer closes it): the number probed, or a negative error
 *   static void ring_stats_more(struct seq_file *m);          its own lines of NAME_stats
 * and calls ring_setup() in its init, ring_stop() then its probes' removal then
 * ring_teardown() in its exit.
 */
#ifndef BTFGEN_RING_H
#define BTFGEN_RING_H

#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/vmalloc.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/sched.h>
#include <linux/timekeeping.h>
#include <linux/spinlock.h>
#include <linux/mutex.h>
#include <linux/atomic.h>
#include <linux/uaccess.h>
#include <linux/preempt.h>
#include <linux/log2.h>

#ifndef BTFGEN_RING_NAME
#error "define BTFGEN_RING_NAME (the /proc file's name) before including btfgen_ring.h"
#endif

static int ring_probe_names(const char **names, int n);
static void ring_stats_more(struct seq_file *m);

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
static atomic64_t events, lost;
static atomic_t lost_since; /* a record was lost: the next one says so (BTFGEN_EVENT_SOME_LOST) */
static bool stopping; /* set before the probes go: a handler still running sends nothing */
/* The process reading the records: its own calls are not recorded (its reads of the ring are
 * traced calls too, and each would make more to read). */
static pid_t reader_tgid = -1; /* -1: none (0 is the idle task's) */
/* What the module probes: set by ring_probe_names() through NAME_functions, or by the module
 * itself (a glob, a parameter). */
static bool registered;
static int registered_err, registered_count;

/* Whether a handler should make no record: the probes are going, or the reader called. */
static inline bool ring_ignored(void)
{
	return READ_ONCE(stopping) || current->tgid == READ_ONCE(reader_tgid);
}

static void ring_copy(u64 at, const void *from, u32 n)
{
	u64 off = at & (ring_size - 1);
	u32 first = min_t(u64, n, ring_size - off);

	memcpy(ring + off, from, first);
	memcpy(ring, (const u8 *)from + first, n - first);
}

static void ring_send(struct event *ev, u32 data_size)
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

/* This CPU's and context's event, its head filled in (handlers run with preemption off). */
static struct event *ring_event(void)
{
	struct event *ev = &scratch[smp_processor_id()].ev[interrupt_context_level() & 3];

	ev->head.tgid = current->tgid;
	ev->head.pid = current->pid;
	memcpy(ev->head.comm, current->comm, sizeof(ev->head.comm));
	ev->head.ns = ktime_get_ns();
	ev->head.cpu = smp_processor_id();
	return ev;
}

/* /proc/NAME: whole records, as many as fit the read (none: 0, read again later). */
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

/* /proc/NAME_functions: names to probe, one a line (a glob cannot name a list of functions);
 * handed to ring_probe_names() when the writer closes the file. */
#define NAMES_MAX (1 << 20)
static char *names_buf;
static size_t names_len;
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

/* Split `text` (changed in place) at any of `seps` and probe its names. */
static int ring_probe_text(char *text, const char *seps)
{
	const char **syms;
	char *line;
	int n = 0, err;

	syms = kvcalloc(strlen(text) / 2 + 1, sizeof(*syms), GFP_KERNEL);
	if (!syms)
		return -ENOMEM;
	while ((line = strsep(&text, seps)))
		if (*line)
			syms[n++] = line;
	err = n ? ring_probe_names(syms, n) : -EINVAL;
	registered = err > 0;
	registered_err = err < 0 ? registered_err ?: err : 0; /* the module's own reason first */
	registered_count = err > 0 ? err : 0;
	if (err < 0)
		pr_err("probing %d names: %d\n", n, err);
	else
		pr_info("probing %d functions of %d named (%d in the table)\n", err, n,
			BTFGEN_NSPECS);
	kvfree(syms);
	return err;
}

static int functions_release(struct inode *inode, struct file *file)
{
	mutex_lock(&names_lock);
	if (!registered && names_buf && names_len) {
		names_buf[names_len] = 0;
		ring_probe_text(names_buf, "\n");
	}
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

/* /proc/NAME_stats: what was sent, what was lost and why, then the module's own lines. */
static int stats_show(struct seq_file *m, void *v)
{
	seq_printf(m, "events %lld\nlost %lld\nfunctions %d\nprobing %d\nerror %d\n",
		   atomic64_read(&events), atomic64_read(&lost), BTFGEN_NSPECS, registered_count,
		   registered_err);
	ring_stats_more(m);
	return 0;
}

static void ring_remove_files(void)
{
	remove_proc_entry(BTFGEN_RING_NAME "_stats", NULL);
	remove_proc_entry(BTFGEN_RING_NAME "_functions", NULL);
	remove_proc_entry(BTFGEN_RING_NAME, NULL);
}

static void ring_free(void)
{
	vfree(scratch);
	vfree(bounce);
	vfree(ring);
}

/* The ring (ring_kb KiB, rounded up to a power of two) and the proc files. */
static int ring_setup(unsigned int ring_kb)
{
	ring_size = roundup_pow_of_two((u64)max(ring_kb, 64U) << 10);
	ring = vzalloc(ring_size);
	bounce = vzalloc(BOUNCE);
	scratch = vzalloc(array_size(nr_cpu_ids, sizeof(*scratch)));
	if (!ring || !bounce || !scratch) {
		ring_free();
		return -ENOMEM;
	}
	btfgen_spec_cache_init();
	if (!proc_create(BTFGEN_RING_NAME, 0400, NULL, &records_ops) ||
	    !proc_create(BTFGEN_RING_NAME "_functions", 0200, NULL, &functions_ops) ||
	    !proc_create_single(BTFGEN_RING_NAME "_stats", 0444, NULL, stats_show)) {
		ring_remove_files();
		ring_free();
		return -ENOMEM;
	}
	return 0;
}

/* First in the module's exit: handlers still running send nothing more. */
static void ring_stop(void)
{
	WRITE_ONCE(stopping, true);
}

/* Last in the module's exit, once its probes are gone: handlers run with preemption off, so
 * once every CPU has been through a quiescent state none is still inside one, and the ring
 * can go. */
static void ring_teardown(void)
{
	synchronize_rcu();
	ring_remove_files();
	ring_free();
}

#endif /* BTFGEN_RING_H */
