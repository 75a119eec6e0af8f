// SPDX-License-Identifier: GPL-2.0-only
/*
 * btfgen_fprobe_args: btfgen's per-function decoders in an fprobe's handlers, and the arguments
 * a call was made with, decoded at entry, given to its exit.
 *
 * One fprobe on vfs_read and vfs_write. At entry, btfgen_entry_NAME() decodes the arguments
 * into struct btfgen_args_NAME, kept for the exit in the fprobe's entry_data where they fit
 * (MAX_FPROBE_DATA_SIZE, BTFGEN_FITS_ENTRY_DATA) or else in a struct btfgen_store keyed by the
 * call (its entry_data address: unique while the call runs). At exit, btfgen_exit_NAME()
 * decodes the return value from the exit's ftrace_regs, which holds no argument, beside the
 * kept arguments. One line a call, in /proc/btfgen_fprobe_args (read: taken; one reader at a
 * time, whose own calls are not traced):
 *
 *   vfs_write tgid=812 count=12345 -> 12345
 *
 *   btfgen /sys/kernel/btf/vmlinux --func vfs_read --func vfs_write --lang kernel -o gen/
 *   cp gen/btfgen.kernel.h . && make -C /lib/modules/$(uname -r)/build M=$PWD modules
 *   sudo insmod btfgen_fprobe_args.ko [store=1]; cat /proc/btfgen_fprobe_args
 *
 * store=1 keeps every call's arguments in the store, where entry_data would hold them too: the
 * path a function whose arguments are larger than entry_data takes. A full store (more calls in
 * flight than its slots) skips the call's exit and counts it; unloading prints the counts.
 */
#define BTFGEN_STORE_SLOTS 1024
#define BTFGEN_STORE_BYTES 64

#include <linux/module.h>
#include <linux/fprobe.h>
#include <linux/proc_fs.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include "btfgen.kernel.h"

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen per-function decoders in an fprobe: arguments kept for the exit");

static bool store;
module_param(store, bool, 0444);
MODULE_PARM_DESC(store, "keep every call's arguments in the store, not in entry_data");

/* What an entry keeps for its exit in entry_data (one size per fprobe: the largest). */
union kept {
	struct btfgen_args_vfs_read read;
	struct btfgen_args_vfs_write write;
};

static_assert(sizeof(union kept) <= BTFGEN_STORE_BYTES);

static struct btfgen_store *kept_store;
static atomic64_t calls, lost, store_full, store_missing;

/* The lines: a ring of fixed-size lines, written whole under the lock. */
#define LINES 1024
#define LINE 112
static char (*lines)[LINE];
static unsigned int line_head, line_tail;	/* next to write, next to read */
static DEFINE_RAW_SPINLOCK(lines_lock);

static void put_line(const char *line)
{
	unsigned long flags;

	raw_spin_lock_irqsave(&lines_lock, flags);
	if (line_head - line_tail < LINES)
		strscpy(lines[line_head++ % LINES], line, LINE);
	else
		atomic64_inc(&lost);
	raw_spin_unlock_irqrestore(&lines_lock, flags);
}

static bool in_store(size_t size)
{
	return store || size > MAX_FPROBE_DATA_SIZE;
}

/* Where the call's arguments are kept: entry_data, or a store slot (NULL: none). */
static void *keep(void *data, size_t size)
{
	void *slot;

	if (!in_store(size))
		return data;
	slot = btfgen_store_put(kept_store, (unsigned long)data, size);
	if (!slot)
		atomic64_inc(&store_full);
	return slot;
}

static void *kept_for(void *data, size_t size)
{
	void *slot;

	if (!in_store(size))
		return data;
	slot = btfgen_store_find(kept_store, (unsigned long)data);
	if (!slot)
		atomic64_inc(&store_missing);
	return slot;
}

/* The process reading /proc/btfgen_fprobe_args (0: none): its own reads and writes are not
 * traced, or each read would make the line the next read returns, and `cat` never end. */
static atomic_t reader;

static int on_entry(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec;
	void *args;

	if (current->tgid == atomic_read(&reader))
		return 1;
	spec = btfgen_spec_by_ip(ip);
	if (spec == &btfgen_specs[BTFGEN_SPEC_vfs_read]) {
		args = keep(data, sizeof(struct btfgen_args_vfs_read));
		if (!args)
			return 1; /* no room: no exit either (counted) */
		btfgen_entry_vfs_read(fregs, args);
	} else if (spec == &btfgen_specs[BTFGEN_SPEC_vfs_write]) {
		args = keep(data, sizeof(struct btfgen_args_vfs_write));
		if (!args)
			return 1;
		btfgen_entry_vfs_write(fregs, args);
	} else {
		return 1;
	}
	return 0;
}

static void on_exit(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct ftrace_regs *fregs, void *data)
{
	const struct btfgen_spec *spec = btfgen_spec_by_ip(ip);
	char line[LINE];
	void *args;

	atomic64_inc(&calls);
	if (spec == &btfgen_specs[BTFGEN_SPEC_vfs_read]) {
		struct btfgen_ret_vfs_read r;
		const struct btfgen_args_vfs_read *a;

		args = kept_for(data, sizeof(*a));
		if (!args)
			return;
		a = args;
		btfgen_exit_vfs_read(fregs, a, &r);
		snprintf(line, sizeof(line), "vfs_read tgid=%d count=%llu -> %lld", current->tgid,
			 (unsigned long long)a->count, (long long)r.value);
	} else if (spec == &btfgen_specs[BTFGEN_SPEC_vfs_write]) {
		struct btfgen_ret_vfs_write r;
		const struct btfgen_args_vfs_write *a;

		args = kept_for(data, sizeof(*a));
		if (!args)
			return;
		a = args;
		btfgen_exit_vfs_write(fregs, a, &r);
		snprintf(line, sizeof(line), "vfs_write tgid=%d count=%llu -> %lld", current->tgid,
			 (unsigned long long)a->count, (long long)r.value);
	} else {
		return;
	}
	if (args != data)
		btfgen_store_release(kept_store, args);
	put_line(line);
}

static struct fprobe probe = {
	.entry_handler = on_entry,
	.exit_handler = on_exit,
	.entry_data_size = sizeof(union kept),
};

/* Read: the lines written since the last read, one a line, as many as fit the buffer. */
static ssize_t lines_read(struct file *file, char __user *buf, size_t count, loff_t *pos)
{
	char line[LINE + 1];
	size_t done = 0;

	for (;;) {
		unsigned long flags;
		size_t n;

		raw_spin_lock_irqsave(&lines_lock, flags);
		if (line_tail == line_head) {
			raw_spin_unlock_irqrestore(&lines_lock, flags);
			break;
		}
		n = strscpy(line, lines[line_tail % LINES], LINE);
		if (done + n + 1 > count) {
			raw_spin_unlock_irqrestore(&lines_lock, flags);
			break;
		}
		line_tail++;
		raw_spin_unlock_irqrestore(&lines_lock, flags);
		line[n++] = '\n';
		if (copy_to_user(buf + done, line, n))
			return done ? done : -EFAULT;
		done += n;
	}
	return done;
}

static int lines_open(struct inode *inode, struct file *file)
{
	/* one reader at a time */
	return atomic_cmpxchg(&reader, 0, current->tgid) ? -EBUSY : 0;
}

static int lines_release(struct inode *inode, struct file *file)
{
	atomic_set(&reader, 0);
	return 0;
}

static const struct proc_ops lines_ops = {
	.proc_open = lines_open,
	.proc_release = lines_release,
	.proc_read = lines_read,
	.proc_lseek = noop_llseek,
};

/* Not const: register_fprobe_syms() sorts the array in place. */
static const char *functions[] = { "vfs_read", "vfs_write" };

static int __init btfgen_fprobe_args_init(void)
{
	int err;

	btfgen_spec_cache_init();
	kept_store = vzalloc(sizeof(*kept_store));
	lines = vzalloc(sizeof(*lines) * LINES);
	if (!kept_store || !lines) {
		err = -ENOMEM;
		goto free;
	}
	if (!proc_create("btfgen_fprobe_args", 0400, NULL, &lines_ops)) {
		err = -ENOMEM;
		goto free;
	}
	err = register_fprobe_syms(&probe, functions, ARRAY_SIZE(functions));
	if (err) {
		remove_proc_entry("btfgen_fprobe_args", NULL);
		goto free;
	}
	return 0;
free:
	vfree(lines);
	vfree(kept_store);
	return err;
}

static void __exit btfgen_fprobe_args_exit(void)
{
	unregister_fprobe(&probe);
	/* Handlers run with preemption off: none runs once this returns. */
	synchronize_rcu();
	remove_proc_entry("btfgen_fprobe_args", NULL);
	pr_info("btfgen_fprobe_args: calls %lld lost %lld store_full %lld store_missing %lld "
		"missed %lu\n", (long long)atomic64_read(&calls), (long long)atomic64_read(&lost),
		(long long)atomic64_read(&store_full), (long long)atomic64_read(&store_missing),
		probe.nmissed);
	vfree(lines);
	vfree(kept_store);
}

module_init(btfgen_fprobe_args_init);
module_exit(btfgen_fprobe_args_exit);
