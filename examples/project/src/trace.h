/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What the BPF programs send to user space: events of the project's own design, filled from
 * btfgen's typed decoders (per-function mode), and btfgen's generic records (--multi). */
#ifndef TRACE_H
#define TRACE_H

enum event_kind {
	EVENT_FALLOCATE = 1,
	EVENT_MAKE_KUID,
	EVENT_LLSEEK,
};

struct event {
	__u32 kind; /* enum event_kind */
	__u32 pid;
	__u64 file; /* the struct file * (fallocate, llseek) */
	__s64 offset;
	__s64 len; /* fallocate's length */
	__s64 ret;
	__s32 mode; /* fallocate's mode; llseek's whence */
	__u32 uid; /* make_kuid's argument */
};

/* One generic record, with the attach cookie that names its function (an index into
 * btfgen_specs.h's tables). */
struct generic_event {
	__u32 cookie;
	__u32 pid;
	struct btfgen_record rec;
};

#endif /* TRACE_H */
