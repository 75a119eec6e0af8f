/* Hand-written: at entry and at return, copy the whole pt_regs and the top of the user stack into
 * a ring buffer record, tagged with the attach cookie. Python finds the values in the copies. */
#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>

#define STACK_BYTES 128
#define RET_BYTES 64

struct record {
    __u64 cookie;
    __u64 is_exit;
    __u64 tid;
    struct pt_regs regs;
    __u8 stack[STACK_BYTES];
    __u8 at_ret[RET_BYTES]; /* at exit: memory at rax, for a struct returned by reference */
};

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 16);
} events SEC(".maps");

static __always_inline int capture(struct pt_regs *ctx, __u64 is_exit)
{
    struct record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
    if (!r)
        return 0;
    r->cookie = bpf_get_attach_cookie(ctx);
    r->is_exit = is_exit;
    r->tid = bpf_get_current_pid_tgid();
    __builtin_memcpy(&r->regs, ctx, sizeof(r->regs));
    if (bpf_probe_read_user(r->stack, sizeof(r->stack), (void *)ctx->rsp))  /* uapi spelling of sp */
        __builtin_memset(r->stack, 0, sizeof(r->stack));
    if (!is_exit || bpf_probe_read_user(r->at_ret, sizeof(r->at_ret), (void *)ctx->rax))
        __builtin_memset(r->at_ret, 0, sizeof(r->at_ret));
    bpf_ringbuf_submit(r, 0);
    return 0;
}

SEC("uprobe")
int on_entry(struct pt_regs *ctx) { return capture(ctx, 0); }

SEC("uretprobe")
int on_exit(struct pt_regs *ctx) { return capture(ctx, 1); }

char LICENSE[] SEC("license") = "GPL";
