/* A stand-in for the kernel's headers, for running the generated kernel C in user space
 * (tests/codegen/test_kernel_c.py): only what btfgen.kernel.h uses, x86_64 layouts. */
#ifndef SHIM_TYPES_H
#define SHIM_TYPES_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
typedef int8_t __s8; typedef uint8_t __u8; typedef int16_t __s16; typedef uint16_t __u16;
typedef int32_t __s32; typedef uint32_t __u32; typedef int64_t __s64; typedef uint64_t __u64;
typedef uint32_t u32; typedef uint64_t u64;
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define noinline __attribute__((noinline))
#define __maybe_unused __attribute__((unused))
#define __aligned(n) __attribute__((aligned(n)))
#define __user
#define READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#define smp_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define smp_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define cmpxchg(p, o, n) ({ __typeof__(*(p)) __o = (o); \
	__atomic_compare_exchange_n((p), &__o, (n), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); __o; })
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define EFAULT 14
#define ENOSPC 28
#define PAGE_SIZE 4096UL
#define KSYM_SYMBOL_LEN 512
/* Only the memory the harness says is mapped reads; anything else faults (-EFAULT), as the
 * kernel's nofault copies say of an unmapped page. */
extern uintptr_t shim_mapped_lo, shim_mapped_hi;
static inline long copy_from_kernel_nofault(void *dst, const void *src, size_t size)
{
	uintptr_t at = (uintptr_t)src;

	if (at < shim_mapped_lo || at > shim_mapped_hi || size > shim_mapped_hi - at)
		return -EFAULT;
	memcpy(dst, src, size);
	return 0;
}
static inline long copy_from_user_nofault(void *dst, const void *src, size_t size)
{
	return copy_from_kernel_nofault(dst, src, size);
}
/* The current task's stack: the memory the harness maps (its stack image lies there). */
struct task_struct;
#define current ((struct task_struct *)0)
#define task_stack_page(task) ((void *)shim_mapped_lo)
#define THREAD_SIZE (shim_mapped_hi - shim_mapped_lo)
extern const char *shim_symbol_of(unsigned long ip);
static inline int sprint_symbol_no_offset(char *buf, unsigned long ip)
{
	return snprintf(buf, KSYM_SYMBOL_LEN, "%s", shim_symbol_of(ip));
}

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax,
		ip, cs, flags, sp, ss;
};
struct __arch_ftrace_regs { struct pt_regs regs; };
struct ftrace_regs;
#define MAX_FPROBE_DATA_SIZE (15 * sizeof(long))
#endif
