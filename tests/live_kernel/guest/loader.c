// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * btfgen live-kernel loader: runs in the guest, statically linked, no libbpf.
 *
 * The host has already turned the BPF ELF object into a flat "bundle" (tests/live_kernel/bundle.py):
 * maps with their initial contents, programs with their instructions and the relocations still
 * to apply (map fd / map value), and where each program attaches. This program only does what
 * needs the guest kernel: create the maps, patch and load the programs, attach them (kprobe and
 * kretprobe through perf_event_open, kprobe_multi through a BPF link with one cookie per
 * function), run the system calls named on the command line, and print every map entry.
 *
 * Output lines (parsed by the host): "attach NAME ok|ERRNO", "call NAME = RET" (in order),
 * "map NAME KEYHEX VALUEHEX SIZE" (the value without its trailing zero bytes, SIZE its full
 * size), "pagesize N". Any failure prints "error: ..." and exits 1.
 *
 * usage: loader BUNDLE [action args...]...   (see run_action)
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_MAPS 64
#define MAX_PROGS 64

struct map {
	char name[32];
	uint32_t type, key_size, value_size, max_entries, flags, init_len;
	const uint8_t *init;
	int fd;
};

struct reloc {
	uint32_t insn, map, kind, offset;
};

struct sym {
	char name[64];
	uint64_t cookie;
};

struct prog {
	char name[64];
	char attach[128];
	uint32_t ninsns, nrelocs, nsyms;
	struct bpf_insn *insns;
	const struct reloc *relocs;
	const struct sym *syms;
	int fd;
};

static struct map maps[MAX_MAPS];
static struct prog progs[MAX_PROGS];
static uint32_t nmaps, nprogs;

static void die(const char *what)
{
	printf("error: %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static uint64_t ptr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* ---- bundle parsing: a cursor over the file, every field in the guest's byte order ---- */

static const uint8_t *cur, *end;

static const void *take(size_t n)
{
	const uint8_t *p = cur;

	if ((size_t)(end - cur) < n) {
		errno = EINVAL;
		die("bundle truncated");
	}
	cur += (n + 7) & ~(size_t)7; /* every record is padded to 8 bytes */
	return p;
}

static uint32_t u32(void)
{
	uint32_t v;

	memcpy(&v, take(4), 4);
	return v;
}

static void read_bundle(const char *path)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st))
		die(path);
	buf = malloc(st.st_size);
	if (!buf || read(fd, buf, st.st_size) != st.st_size)
		die(path);
	close(fd);
	cur = buf;
	end = buf + st.st_size;
	if (memcmp(take(8), "BTFGBNDL", 8)) {
		errno = EINVAL;
		die("bundle magic");
	}
	nmaps = u32();
	nprogs = u32();
	if (nmaps > MAX_MAPS || nprogs > MAX_PROGS) {
		errno = E2BIG;
		die("bundle counts");
	}
	for (uint32_t i = 0; i < nmaps; i++) {
		struct map *m = &maps[i];

		memcpy(m->name, take(32), 32);
		m->name[31] = 0;
		m->type = u32();
		m->key_size = u32();
		m->value_size = u32();
		m->max_entries = u32();
		m->flags = u32();
		m->init_len = u32();
		m->init = m->init_len ? take(m->init_len) : NULL;
	}
	for (uint32_t i = 0; i < nprogs; i++) {
		struct prog *p = &progs[i];

		memcpy(p->name, take(64), 64);
		p->name[63] = 0;
		memcpy(p->attach, take(128), 128);
		p->attach[127] = 0;
		p->ninsns = u32();
		p->nrelocs = u32();
		p->nsyms = u32();
		/* copied: the relocations below patch the instructions in place */
		p->insns = malloc(p->ninsns * sizeof(struct bpf_insn));
		memcpy(p->insns, take(p->ninsns * sizeof(struct bpf_insn)),
		       p->ninsns * sizeof(struct bpf_insn));
		p->relocs = p->nrelocs ? take(p->nrelocs * sizeof(struct reloc)) : NULL;
		p->syms = p->nsyms ? take(p->nsyms * sizeof(struct sym)) : NULL;
	}
}

/* ---- maps and programs ---- */

static void create_maps(void)
{
	for (uint32_t i = 0; i < nmaps; i++) {
		struct map *m = &maps[i];
		union bpf_attr a = { 0 };

		a.map_type = m->type;
		a.key_size = m->key_size;
		a.value_size = m->value_size;
		a.max_entries = m->max_entries;
		a.map_flags = m->flags;
		/* kernel map names: at most 15 characters of [A-Za-z0-9_.] */
		for (int j = 0; j < 15 && m->name[j]; j++)
			a.map_name[j] = m->name[j];
		m->fd = sys_bpf(BPF_MAP_CREATE, &a);
		if (m->fd < 0)
			die(m->name);
		if (m->init) {
			uint32_t zero = 0;
			union bpf_attr u = { 0 };

			u.map_fd = m->fd;
			u.key = ptr(&zero);
			u.value = ptr(m->init);
			if (sys_bpf(BPF_MAP_UPDATE_ELEM, &u))
				die(m->name);
		}
	}
}

static char log_buf[1 << 20];

static int is_multi(const struct prog *p)
{
	return !strncmp(p->attach, "kprobe.multi", 12) || !strncmp(p->attach, "kretprobe.multi", 15);
}

static void load_progs(void)
{
	for (uint32_t i = 0; i < nprogs; i++) {
		struct prog *p = &progs[i];
		union bpf_attr a = { 0 };

		for (uint32_t r = 0; r < p->nrelocs; r++) {
			const struct reloc *rl = &p->relocs[r];
			struct bpf_insn *insn = &p->insns[rl->insn];

			insn[0].src_reg = rl->kind == 1 ? BPF_PSEUDO_MAP_FD : BPF_PSEUDO_MAP_VALUE;
			insn[0].imm = maps[rl->map].fd;
			insn[1].imm = rl->kind == 1 ? 0 : (int32_t)rl->offset;
		}
		a.prog_type = BPF_PROG_TYPE_KPROBE;
		a.insns = ptr(p->insns);
		a.insn_cnt = p->ninsns;
		a.license = ptr("GPL");
		if (is_multi(p))
			a.expected_attach_type = BPF_TRACE_KPROBE_MULTI;
		for (int j = 0; j < 15 && p->name[j]; j++)
			a.prog_name[j] = p->name[j];
		/* Without a log first, as libbpf loads: at level 1 the verifier prints every
		 * instruction it walks, which under TCG cost more than the walk itself. The log is
		 * asked for only to say why a program was refused. */
		p->fd = sys_bpf(BPF_PROG_LOAD, &a);
		if (p->fd < 0) {
			a.log_buf = ptr(log_buf);
			a.log_size = sizeof(log_buf);
			a.log_level = 1;
			p->fd = sys_bpf(BPF_PROG_LOAD, &a);
		}
		if (p->fd < 0) {
			int e = errno;
			size_t n = strlen(log_buf);

			/* the verifier's verdict is at the end of its log */
			printf("verifier log (%s):\n%s\n", p->name, n > 6000 ? log_buf + n - 6000 : log_buf);
			errno = e;
			die(p->name);
		}
	}
}

static int read_sysfs_int(const char *path, const char *prefix)
{
	char buf[64] = { 0 };
	int fd = open(path, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0)
		die(path);
	close(fd);
	return atoi(buf + strlen(prefix));
}

static int attach_kprobe(const struct prog *p, const char *func, int ret)
{
	struct perf_event_attr attr = { 0 };
	int fd;

	attr.size = sizeof(attr);
	attr.type = read_sysfs_int("/sys/bus/event_source/devices/kprobe/type", "");
	if (ret)
		attr.config = 1ULL << read_sysfs_int(
			"/sys/bus/event_source/devices/kprobe/format/retprobe", "config:");
	attr.config1 = ptr(func); /* kprobe_func */
	attr.config2 = 0;	  /* probe_offset */
	fd = syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, p->fd) || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0))
		return -errno;
	return 0;
}

static int attach_multi(const struct prog *p, int ret)
{
	const char *names[64];
	uint64_t cookies[64];
	union bpf_attr a = { 0 };
	int fd;

	if (p->nsyms > 64)
		return -E2BIG;
	for (uint32_t i = 0; i < p->nsyms; i++) {
		names[i] = p->syms[i].name;
		cookies[i] = p->syms[i].cookie;
	}
	a.link_create.prog_fd = p->fd;
	a.link_create.attach_type = BPF_TRACE_KPROBE_MULTI;
	a.link_create.kprobe_multi.flags = ret ? BPF_F_KPROBE_MULTI_RETURN : 0;
	a.link_create.kprobe_multi.cnt = p->nsyms;
	a.link_create.kprobe_multi.syms = ptr(names);
	a.link_create.kprobe_multi.cookies = ptr(cookies);
	fd = sys_bpf(BPF_LINK_CREATE, &a);
	return fd < 0 ? -errno : 0;
}

static void attach_all(void)
{
	for (uint32_t i = 0; i < nprogs; i++) {
		const struct prog *p = &progs[i];
		const char *colon = strchr(p->attach, ':');
		int ret = !strncmp(p->attach, "kretprobe", 9), err;

		if (is_multi(p))
			err = attach_multi(p, ret);
		else if (colon)
			err = attach_kprobe(p, colon + 1, ret);
		else
			err = -EINVAL;
		if (err)
			printf("attach %s %s\n", p->name, strerrorname_np(-err) ?: "?");
		else
			printf("attach %s ok\n", p->name);
	}
}

/* ---- the system calls, with the values the host chose ---- */

static int phase_fd = -1, marker_fd = -2;

/* Programs that have a map named "phase" record only while it is non-zero: the loader sets it to
 * the 1-based number of the action it is running, so each record names the call that caused it. */
static void set_phase(uint32_t phase)
{
	uint32_t zero = 0;
	union bpf_attr u = { 0 };

	/* the same boundaries in the trace buffer, for the kernel's own fprobe events */
	if (marker_fd == -2)
		marker_fd = open("/sys/kernel/tracing/trace_marker", O_WRONLY);
	if (marker_fd >= 0)
		dprintf(marker_fd, "btfgen-phase %u\n", phase);
	if (phase_fd < 0)
		return;
	u.map_fd = phase_fd;
	u.key = ptr(&zero);
	u.value = ptr(&phase);
	if (sys_bpf(BPF_MAP_UPDATE_ELEM, &u))
		die("phase");
}

static uint64_t num(const char *s)
{
	return strtoull(s, NULL, 0);
}

/* Runs one action; returns how many arguments it consumed. */
static int run_action(char **argv, int argc)
{
	const char *name = argv[0];
	static int fd = -1;

	if (fd < 0) {
		fd = open("/tmp/btfgen-live", O_RDWR | O_CREAT, 0600);
		if (fd < 0)
			die("/tmp/btfgen-live");
	}
	if (!strcmp(name, "mmap") && argc >= 6) {
		/* mmap ADDR LEN PROT FLAGS OFFSET: anonymous, so the kernel keeps every value */
		void *p = mmap((void *)(uintptr_t)num(argv[1]), num(argv[2]), num(argv[3]),
			       num(argv[4]), -1, (off_t)num(argv[5]));
		printf("call mmap = %#" PRIxPTR "\n", (uintptr_t)p);
		if (p != MAP_FAILED)
			munmap(p, num(argv[2]));
		return 6;
	}
	if (!strcmp(name, "fchown") && argc >= 3) {
		long r = fchown(fd, num(argv[1]), num(argv[2]));
		printf("call fchown = %ld\n", r ? -(long)errno : 0L);
		return 3;
	}
	if (!strcmp(name, "fallocate") && argc >= 4) {
		long r = fallocate(fd, num(argv[1]), (off_t)num(argv[2]), (off_t)num(argv[3]));
		printf("call fallocate = %ld\n", r ? -(long)errno : 0L);
		return 4;
	}
	if (!strcmp(name, "lseek") && argc >= 2) {
		off_t r = lseek(fd, (off_t)num(argv[1]), SEEK_SET);
		printf("call lseek = %#llx\n", (unsigned long long)r);
		return 2;
	}
	printf("error: unknown action %s\n", name);
	exit(1);
}

static void dump_maps(void)
{
	for (uint32_t i = 0; i < nmaps; i++) {
		struct map *m = &maps[i];
		uint8_t key[256], next[256], value[16384];
		union bpf_attr a = { 0 };
		int first = 1;

		/* data sections (.rodata, .bss, ...) are inputs, not results; per-CPU maps would
		 * return one value per possible CPU */
		if (m->name[0] == '.' || (m->type != BPF_MAP_TYPE_HASH && m->type != BPF_MAP_TYPE_ARRAY) ||
		    m->key_size > sizeof(key) || m->value_size > sizeof(value))
			continue;
		for (;;) {
			a.map_fd = m->fd;
			a.key = first ? 0 : ptr(key);
			a.next_key = ptr(next);
			if (sys_bpf(BPF_MAP_GET_NEXT_KEY, &a))
				break;
			first = 0;
			memcpy(key, next, m->key_size);
			a.key = ptr(key);
			a.value = ptr(value);
			if (sys_bpf(BPF_MAP_LOOKUP_ELEM, &a))
				continue;
			printf("map %s ", m->name);
			for (uint32_t j = 0; j < m->key_size; j++)
				printf("%02x", key[j]);
			/* A generic record is the header's size (8 KiB of data): its bytes past the
			 * last non-zero one are left to the host, which pads to the size said, so the
			 * guest's slow serial console carries only what a record holds. */
			uint32_t used = m->value_size;
			while (used && !value[used - 1])
				used--;
			printf(" ");
			for (uint32_t j = 0; j < used; j++)
				printf("%02x", value[j]);
			printf(" %u\n", m->value_size);
			memset(&a, 0, sizeof(a));
		}
	}
}

int main(int argc, char **argv)
{
	uint32_t tgid = getpid(), zero = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s BUNDLE [action args...]...\n", argv[0]);
		return 2;
	}
	read_bundle(argv[1]);
	create_maps();
	/* programs filter on the loader's process through a map named "tgid" when they have one */
	for (uint32_t i = 0; i < nmaps; i++) {
		if (!strcmp(maps[i].name, "tgid")) {
			union bpf_attr u = { 0 };

			u.map_fd = maps[i].fd;
			u.key = ptr(&zero);
			u.value = ptr(&tgid);
			if (sys_bpf(BPF_MAP_UPDATE_ELEM, &u))
				die("tgid");
		}
	}
	load_progs();
	attach_all();
	printf("pagesize %ld\n", sysconf(_SC_PAGESIZE));
	for (uint32_t i = 0; i < nmaps; i++)
		if (!strcmp(maps[i].name, "phase"))
			phase_fd = maps[i].fd;
	for (int i = 2, n = 1; i < argc; n++) {
		set_phase(n);
		i += run_action(argv + i, argc - i);
		set_phase(0);
	}
	dump_maps();
	return 0;
}
