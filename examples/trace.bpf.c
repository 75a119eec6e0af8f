/* btfgen_trace.py's BPF side: btfgen's generic decoder, one program for every traced function.
 * The attach cookie indexes `specs`, which user space fills with the generated Python module's
 * spec(name); each call and each return becomes one struct btfgen_record in `events`. */
#define BTFGEN_USER
/* Self-contained (no vmlinux.h, no kernel headers): it brings the __u* types and
 * bpf_helpers.h. */
#include "btfgen.bpf.h"

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct btfgen_spec);
} specs SEC(".maps");

struct {
	__uint(type, 27 /* BPF_MAP_TYPE_RINGBUF */);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

static __always_inline int record(void *ctx, __u32 kind)
{
	__u32 at = bpf_get_attach_cookie(ctx);
	const struct btfgen_spec *spec = bpf_map_lookup_elem(&specs, &at);
	struct btfgen_record *r;

	if (!spec)
		return 0;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r)
		return 0;
	btfgen_generic_decode(ctx, BTFGEN_SP(ctx), spec, kind, r);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("uprobe")
int trace_entry(void *ctx) { return record(ctx, 0); }

SEC("uretprobe")
int trace_exit(void *ctx) { return record(ctx, 1); }

char LICENSE[] SEC("license") = "GPL";
