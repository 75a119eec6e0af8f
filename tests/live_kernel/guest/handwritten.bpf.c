// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A hand-written probe that proves the loader before any generated code is involved: it reads
 * do_mmap()'s first register arguments at entry and its return value at exit, with the address
 * argument kept from entry, from the kprobe's struct pt_regs.
 *
 * Register choice per arch (first integer argument registers, return register) — the very table
 * btfgen derives from its descriptions, written out once here by hand.
 */
#ifdef GUEST_32BIT
/* A 32-bit kernel's vmlinux.h says `long` where the BPF target's long has 64 bits, so its
 * struct pt_regs offsets would be wrong: read the 32-bit registers by index instead. */
typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
struct pt_regs;
#include <bpf/bpf_helpers.h>
#define REG32(i) ((__u64)((const __u32 *)ctx)[i])
enum { BPF_MAP_TYPE_HASH = 1, BPF_MAP_TYPE_ARRAY = 2, BPF_ANY = 0, BPF_NOEXIST = 1 };
#else
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#endif

#if defined(__TARGET_ARCH_x86) && defined(GUEST_32BIT)
/* i386 pt_regs: bx cx dx si di bp ax ... */
#define ARG(n) ((n) == 0 ? REG32(6) : (n) == 1 ? REG32(2) : REG32(1))
#define RET REG32(6)
#elif defined(__TARGET_ARCH_x86)
#define ARG(n) ((n) == 0 ? ctx->di : (n) == 1 ? ctx->si : (n) == 2 ? ctx->dx : ctx->cx)
#define RET ctx->ax
#elif defined(__TARGET_ARCH_arm64)
#define ARG(n) ctx->regs[n]
#define RET ctx->regs[0]
#elif defined(__TARGET_ARCH_riscv)
#define ARG(n) ((n) == 0 ? ctx->a0 : (n) == 1 ? ctx->a1 : ctx->a2)
#define RET ctx->a0
#elif defined(__TARGET_ARCH_s390)
#define ARG(n) ctx->gprs[2 + (n)]
#define RET ctx->gprs[2]
#elif defined(__TARGET_ARCH_powerpc)
#define ARG(n) ctx->gpr[3 + (n)]
#define RET ctx->gpr[3]
#elif defined(__TARGET_ARCH_arm)
#define ARG(n) REG32(n) /* uregs[n] */
#define RET REG32(0)
#else
#error "unknown __TARGET_ARCH"
#endif

struct map_def {
	unsigned int type, key_size, value_size, max_entries, flags;
};

struct rec {
	__u64 hits;
	__u64 v[3];
};

enum { MMAP_ENTRY, MMAP_EXIT };

/* key: action number (the loader's "phase") << 8 | probe */
struct map_def results SEC("maps") = { BPF_MAP_TYPE_HASH, 4, sizeof(struct rec), 256, 0 };
struct map_def tgid SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0 };
struct map_def phase SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0 };
struct map_def saved SEC("maps") = { BPF_MAP_TYPE_HASH, 8, 8, 64, 0 };

static __always_inline int ours(void)
{
	__u32 zero = 0, *want = bpf_map_lookup_elem(&tgid, &zero);
	__u32 *now = bpf_map_lookup_elem(&phase, &zero);

	return want && *want == bpf_get_current_pid_tgid() >> 32 && now && *now;
}

static __always_inline void put(__u32 idx, __u64 a, __u64 b, __u64 c)
{
	__u32 zero = 0, *now = bpf_map_lookup_elem(&phase, &zero), key;
	struct rec *r, fresh = { 1, { a, b, c } };

	if (!now)
		return;
	key = *now << 8 | idx;
	/* the first call within an action is the one the loader made on purpose */
	r = bpf_map_lookup_elem(&results, &key);
	if (r)
		r->hits++;
	else
		bpf_map_update_elem(&results, &key, &fresh, BPF_NOEXIST);
}

SEC("kprobe/do_mmap")
int mmap_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), addr = ARG(1);

	if (!ours())
		return 0;
	bpf_map_update_elem(&saved, &id, &addr, BPF_ANY);
	put(MMAP_ENTRY, addr, ARG(2), 0);
	return 0;
}

SEC("kretprobe/do_mmap")
int mmap_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), *addr;

	if (!ours())
		return 0;
	addr = bpf_map_lookup_elem(&saved, &id);
	put(MMAP_EXIT, RET, addr ? *addr : ~0ULL, 0);
	bpf_map_delete_elem(&saved, &id);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
