/* `btfgen trace`'s BPF side: btfgen's generic decoder, one program for every traced function.
 * The attach cookie indexes `specs`, which user space fills with the generated Python module's
 * spec(name); each call and each return becomes one struct trace_event in `events`.
 *
 * Built twice over: with -DBTFGEN_USER for uprobe_multi links on a user program (values read
 * with bpf_probe_read_user), without it for kprobe_multi links on kernel functions. And each of
 * those again with -DBTFGEN_SESSION: one program for entry and exit on one kprobe.session or
 * uprobe.session link, the per-call state in the session cookie instead of a map (build.py). */

/* Self-contained (no vmlinux.h, no kernel headers): it brings the __u* types and
 * bpf_helpers.h. BTFGEN_SAVE_ARGS: btfgen_generic_exit follows a struct returned through a
 * hidden pointer the callee does not hand back (s390x, arm64) with the pointer kept at entry. */
#ifndef BTFGEN_SESSION
#define BTFGEN_SAVE_ARGS
#define BTFGEN_SAVE_MAX 8 /* only the generic decoder's 8-byte carry stack is used here */
#endif
#include "btfgen.bpf.h"
/* struct trace_event and BTFGEN_TRACE_MAX_FUNCTIONS, printed from btfgen/decoder/spec_format.py
 * (found beside this file: a quoted include looks there first). */
#include "trace_event.h"

#ifdef BTFGEN_USER
#define TRACE_ENTRY "uprobe"
#define TRACE_EXIT "uretprobe"
#else
#define TRACE_ENTRY "kprobe"
#define TRACE_EXIT "kretprobe"
#endif

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, BTFGEN_TRACE_MAX_FUNCTIONS);
	__type(key, __u32);
	__type(value, struct btfgen_spec);
} specs SEC(".maps");

/* [0]: 1 to trace only the processes in `followed` (else every one); [1]: never this one (the
 * tracer itself, whose ring-buffer reads would otherwise show up in the functions it traces);
 * [2]: child_pid's offset in the sched_process_fork event (from its tracefs format). */
struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u32);
} filter SEC(".maps");

/* The traced command (or --pid) and every process it forks, by tgid. */
struct {
	__uint(type, 1 /* BPF_MAP_TYPE_HASH */);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

struct {
	__uint(type, 27 /* BPF_MAP_TYPE_RINGBUF */);
	__uint(max_entries, 1 << 22); /* run.py sizes it before loading: --ring-size */
} events SEC(".maps");

/* Records the ring buffer had no room for, per CPU (a plain add: no atomics, which 32-bit
 * JITs may lack). User space sums them at the end. */
struct {
	__uint(type, 6 /* BPF_MAP_TYPE_PERCPU_ARRAY */);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* struct trace_event (trace_event.h): who made the call and when, then the record. Kernel
 * functions run on behalf of any process; entry and exit are paired per thread (pid) by user
 * space, which also prints the time between them. */

static __always_inline __u32 setting(__u32 at)
{
	__u32 *v = bpf_map_lookup_elem(&filter, &at);

	return v ? *v : 0;
}

static __always_inline int wanted(__u32 tgid)
{
	if (setting(0) && !bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	return setting(1) != tgid;
}

/* Runs in the parent: a followed process's new child is followed too (a new thread's id is
 * added as well, harmlessly: it is never anyone's tgid but its process's). */
SEC("tracepoint/sched/sched_process_fork")
int follow_fork(void *ctx)
{
	__u32 parent = bpf_get_current_pid_tgid() >> 32, child = 0;
	__u8 yes = 1;

	if (!setting(0) || !bpf_map_lookup_elem(&followed, &parent))
		return 0;
	if (bpf_probe_read_kernel(&child, sizeof(child),
				  (const char *)ctx + (setting(2) & 0xfff)))
		return 0;
	bpf_map_update_elem(&followed, &child, &yes, 0 /* BPF_ANY */);
	return 0;
}

/* Wake the reader only once the ring is a quarter full: a wakeup per event cost the traced
 * program as much as the event itself, and the reader drains on a timer (run.DRAIN_MS) anyway. */
static __always_inline __u64 wakeup(void)
{
	__u64 avail = bpf_ringbuf_query(&events, 0 /* BPF_RB_AVAIL_DATA */);
	__u64 size = bpf_ringbuf_query(&events, 1 /* BPF_RB_RING_SIZE */);

	return avail >= size >> 2 ? 2 /* BPF_RB_FORCE_WAKEUP */ : 1 /* BPF_RB_NO_WAKEUP */;
}

static __always_inline int record(void *ctx, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 at = bpf_get_attach_cookie(ctx);
	const struct btfgen_spec *spec;
	struct trace_event *e;

	if (!wanted(id >> 32))
		return 0;
	spec = bpf_map_lookup_elem(&specs, &at);
	if (!spec)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);

		if (n)
			*n += 1;
		return 0;
	}
	e->tgid = id >> 32;
	e->pid = (__u32)id;
	e->ns = bpf_ktime_get_ns();
	e->cpu = bpf_get_smp_processor_id();
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
#ifdef BTFGEN_SESSION
	if (kind)
		btfgen_generic_session_exit(ctx, BTFGEN_SP(ctx), spec, &e->rec);
	else
		btfgen_generic_session_entry(ctx, BTFGEN_SP(ctx), spec, &e->rec);
#else
	if (kind)
		btfgen_generic_exit(ctx, BTFGEN_SP(ctx), spec, &e->rec);
	else
		btfgen_generic_entry(ctx, BTFGEN_SP(ctx), spec, &e->rec);
#endif
	bpf_ringbuf_submit(e, wakeup());
	return 0;
}

#ifdef BTFGEN_SESSION
/* Entry and exit of every function on one link. The section is plain kprobe/uprobe because
 * libbpf 1.1 (Debian 12's) knows no ".session" sections: run.py sets the attach type itself. A
 * call that is not wanted, or has no spec, returns 1 at entry: the kernel then skips its exit. */
SEC(TRACE_ENTRY)
int trace_session(void *ctx)
{
	__u32 at = bpf_get_attach_cookie(ctx);

	if (btfgen_session_is_return(ctx))
		return record(ctx, 1);
	if (!wanted(bpf_get_current_pid_tgid() >> 32) || !bpf_map_lookup_elem(&specs, &at))
		return 1;
	/* A ring buffer without room loses the entry record, not the cookie: the exit, which */
	/* still runs, reads a zero carried pointer as unavailable rather than a stale one. */
	*btfgen_session_cookie(ctx) = 0;
	record(ctx, 0);
	return 0;
}
#else
SEC(TRACE_ENTRY)
int trace_entry(void *ctx) { return record(ctx, 0); }

SEC(TRACE_EXIT)
int trace_exit(void *ctx) { return record(ctx, 1); }
#endif

char LICENSE[] SEC("license") = "GPL";
