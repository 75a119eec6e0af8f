// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Kernel function arguments and return values, typed by btfgen's generated decoders.
 *
 * Per-function mode: a kprobe and a kretprobe per function, each with its own typed struct
 * (struct btfgen_args_NAME); arguments are saved at entry (BTFGEN_SAVE_ARGS) because at exit only
 * the return registers can be trusted. --multi mode: one program for every function of
 * btfgen_specs.h on a kprobe_multi link, the attach cookie naming the function's spec.
 */
#include "vmlinux.h"
#define BTFGEN_SAVE_ARGS
#include "btfgen_specs.h" /* includes btfgen.bpf.h, which includes <bpf/bpf_helpers.h> */
#include "trace.h"

char LICENSE[] SEC("license") = "GPL";

/* Only this process (the command the loader runs); 0: every process. */
const volatile __u32 target_tgid = 0;

/* Records the ring buffers had no room for: the loader reports them, never drops them silently. */
__u64 lost = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} records SEC(".maps");

static __always_inline int traced(void)
{
	return !target_tgid || bpf_get_current_pid_tgid() >> 32 == target_tgid;
}

static __always_inline struct event *reserve(__u32 kind)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	return e;
}

/* The entry of each function saves its typed arguments; the exit reads them back. */
#define SAVE_AT_ENTRY(fn)                                                   \
	SEC("kprobe/" #fn)                                                  \
	int entry_##fn(struct pt_regs *ctx)                                 \
	{                                                                   \
		struct btfgen_args_##fn *a;                                 \
		if (!traced())                                              \
			return 0;                                           \
		a = btfgen_save_slot(BTFGEN_ID_##fn);                       \
		if (a)                                                      \
			btfgen_entry_##fn(ctx, a);                          \
		return 0;                                                   \
	}

SAVE_AT_ENTRY(vfs_fallocate)
SAVE_AT_ENTRY(make_kuid)
SAVE_AT_ENTRY(shmem_file_llseek)

SEC("kretprobe/vfs_fallocate")
int exit_vfs_fallocate(struct pt_regs *ctx)
{
	const struct btfgen_args_vfs_fallocate *a;
	struct btfgen_ret_vfs_fallocate r;
	struct event *e;

	if (!traced() || !(a = btfgen_saved_slot(BTFGEN_ID_vfs_fallocate)))
		return 0;
	btfgen_exit_vfs_fallocate(ctx, a, &r);
	if ((e = reserve(EVENT_FALLOCATE))) {
		e->file = (__u64)(unsigned long)a->file;
		e->mode = a->mode;
		e->offset = a->offset;
		e->len = a->len;
		e->ret = r.value;
		bpf_ringbuf_submit(e, 0);
	}
	btfgen_release_slot(BTFGEN_ID_vfs_fallocate);
	return 0;
}

SEC("kretprobe/make_kuid")
int exit_make_kuid(struct pt_regs *ctx)
{
	const struct btfgen_args_make_kuid *a;
	struct btfgen_ret_make_kuid r;
	struct event *e;

	if (!traced() || !(a = btfgen_saved_slot(BTFGEN_ID_make_kuid)))
		return 0;
	btfgen_exit_make_kuid(ctx, a, &r);
	if ((e = reserve(EVENT_MAKE_KUID))) {
		e->uid = a->uid;
		e->ret = r.value.val; /* kuid_t, a struct returned by value */
		bpf_ringbuf_submit(e, 0);
	}
	btfgen_release_slot(BTFGEN_ID_make_kuid);
	return 0;
}

SEC("kretprobe/shmem_file_llseek")
int exit_shmem_file_llseek(struct pt_regs *ctx)
{
	const struct btfgen_args_shmem_file_llseek *a;
	struct btfgen_ret_shmem_file_llseek r;
	struct event *e;

	if (!traced() || !(a = btfgen_saved_slot(BTFGEN_ID_shmem_file_llseek)))
		return 0;
	btfgen_exit_shmem_file_llseek(ctx, a, &r);
	if ((e = reserve(EVENT_LLSEEK))) {
		e->file = (__u64)(unsigned long)a->file;
		e->offset = a->offset;
		e->mode = a->whence;
		e->ret = r.value;
		bpf_ringbuf_submit(e, 0);
	}
	btfgen_release_slot(BTFGEN_ID_shmem_file_llseek);
	return 0;
}

/* --multi: every function of the table, one program, the spec found by the attach cookie. */
static __always_inline int generic(struct pt_regs *ctx, int at_exit)
{
	const struct btfgen_spec *spec;
	struct generic_event *g;
	__u64 cookie;

	if (!traced())
		return 0;
	cookie = bpf_get_attach_cookie(ctx);
	spec = btfgen_spec_at(cookie);
	if (!spec)
		return 0;
	g = bpf_ringbuf_reserve(&records, sizeof(*g), 0);
	if (!g) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	g->cookie = cookie;
	g->pid = bpf_get_current_pid_tgid() >> 32;
	/* The _entry/_exit pair keeps a returned struct's hidden pointer from entry to exit where
	 * the ABI does not hand it back (arm64's x8). */
	if (at_exit)
		btfgen_generic_exit(ctx, BTFGEN_SP(ctx), spec, &g->rec);
	else
		btfgen_generic_entry(ctx, BTFGEN_SP(ctx), spec, &g->rec);
	bpf_ringbuf_submit(g, 0);
	return 0;
}

SEC("kprobe.multi")
int generic_entry(struct pt_regs *ctx)
{
	return generic(ctx, 0);
}

SEC("kretprobe.multi")
int generic_exit(struct pt_regs *ctx)
{
	return generic(ctx, 1);
}
