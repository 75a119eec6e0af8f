// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The loader: prints typed arguments and return values of kernel functions.
 *
 *   trace [-m] [-d SECONDS] [-- COMMAND [ARG...]]
 *
 * Without -m: a few functions through btfgen's per-function typed decoders (src/trace.bpf.c).
 * With -m: every function of btfgen_specs.h on one kprobe_multi link, btfgen's generic decoder,
 * each record printed with the value descriptions of btfgen_specs.h (the user-space half).
 * With a command: only that process is traced, from exec to exit. Without: every process, until
 * Ctrl-C or -d SECONDS.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "btfgen_specs.h"
#include "trace.h"
#include "trace.skel.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, args) : 0;
}

static int on_event(void *ctx, void *data, size_t size)
{
	const struct event *e = data;

	(void)ctx;
	if (size < sizeof(*e))
		return 0;
	switch (e->kind) {
	case EVENT_FALLOCATE:
		printf("vfs_fallocate(file=0x%llx, mode=%d, offset=%lld, len=%lld) -> %lld\n",
		       (unsigned long long)e->file, e->mode, (long long)e->offset,
		       (long long)e->len, (long long)e->ret);
		break;
	case EVENT_MAKE_KUID:
		printf("make_kuid(uid=%u) -> {val=%lld}\n", e->uid, (long long)e->ret);
		break;
	case EVENT_LLSEEK:
		printf("shmem_file_llseek(file=0x%llx, offset=%lld, whence=%d) -> %lld\n",
		       (unsigned long long)e->file, (long long)e->offset, e->mode,
		       (long long)e->ret);
		break;
	}
	return 0;
}

/* One value of a generic record, as btfgen_specs.h describes it. */
static void print_value(const struct btfgen_record *rec, const struct btfgen_value_info *v)
{
	__u64 x;
	int i;

	if (v->unavailable) {
		printf("<unavailable: %s>", v->unavailable);
		return;
	}
	if (rec->failed & v->op_mask) {
		printf("<unreadable>");
		return;
	}
	if (btfgen_value_int(rec, v, &x) == 0) {
		switch (v->kind) {
		case BTFGEN_VALUE_SIGNED: printf("%lld", (long long)x); break;
		case BTFGEN_VALUE_BOOL: printf(x ? "true" : "false"); break;
		case BTFGEN_VALUE_POINTER: printf("0x%llx", (unsigned long long)x); break;
		default: printf("%llu", (unsigned long long)x); break;
		}
		return;
	}
	if (v->data_off < 0) { /* only the pointer to it was kept */
		printf("<%s at %s>", v->type, "a pointer the record does not follow");
		return;
	}
	/* A struct, union, array or float: its bytes, in memory order. */
	printf("bytes:");
	for (i = 0; i < v->size && v->data_off + i < BTFGEN_DATA_SIZE; i++)
		printf("%02x", rec->data[v->data_off + i]);
}

static int on_record(void *ctx, void *data, size_t size)
{
	const struct generic_event *g = data;
	const struct btfgen_func_info *f;
	__u32 i;

	(void)ctx;
	if (size < sizeof(*g) || g->cookie >= BTFGEN_NSPECS)
		return 0;
	f = &btfgen_funcs[g->cookie];
	if (g->rec.kind == 0) {
		printf("%s(", f->name);
		for (i = 0; i < f->nargs; i++) {
			printf("%s%s=", i ? ", " : "", f->args[i].name);
			print_value(&g->rec, &f->args[i]);
		}
		printf(")\n");
	} else if (f->ret) {
		printf("%s -> ", f->name);
		print_value(&g->rec, f->ret);
		printf("\n");
	} else {
		printf("%s -> void\n", f->name);
	}
	return 0;
}

static int attach_multi(struct trace_bpf *skel)
{
	const char *syms[BTFGEN_NSPECS];
	__u64 cookies[BTFGEN_NSPECS];
	LIBBPF_OPTS(bpf_kprobe_multi_opts, opts, .syms = syms, .cookies = cookies,
		    .cnt = BTFGEN_NSPECS);
	unsigned i;

	for (i = 0; i < BTFGEN_NSPECS; i++) {
		syms[i] = btfgen_funcs[i].name;
		cookies[i] = i; /* the index of the function's spec in btfgen_specs */
	}
	skel->links.generic_entry =
		bpf_program__attach_kprobe_multi_opts(skel->progs.generic_entry, NULL, &opts);
	if (!skel->links.generic_entry)
		return -errno;
	opts.retprobe = true;
	skel->links.generic_exit =
		bpf_program__attach_kprobe_multi_opts(skel->progs.generic_exit, NULL, &opts);
	return skel->links.generic_exit ? 0 : -errno;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [-m] [-d SECONDS] [-- COMMAND [ARG...]]\n", argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	struct ring_buffer *rb = NULL;
	struct trace_bpf *skel;
	int multi = 0, go[2] = { -1, -1 }, opt, err, status = 0;
	double duration = 0;
	pid_t child = 0;
	time_t until;

	while ((opt = getopt(argc, argv, "md:h")) != -1) {
		switch (opt) {
		case 'm': multi = 1; break;
		case 'd': duration = atof(optarg); break;
		default: usage(argv[0]);
		}
	}
	libbpf_set_print(libbpf_quiet);
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* The command waits for the probes before it execs, so it is traced from its first call. */
	if (optind < argc) {
		char byte;

		if (pipe(go))
			return perror("pipe"), 1;
		child = fork();
		if (child < 0)
			return perror("fork"), 1;
		if (child == 0) {
			close(go[1]);
			if (read(go[0], &byte, 1) != 1)
				_exit(127);
			execvp(argv[optind], &argv[optind]);
			perror(argv[optind]);
			_exit(127);
		}
		close(go[0]);
	}

	skel = trace_bpf__open();
	if (!skel) {
		fprintf(stderr, "trace: cannot open the BPF object: %s\n", strerror(errno));
		return 1;
	}
	skel->rodata->target_tgid = child;
	/* Load only what this mode attaches: a kernel without kprobe_multi still runs the other. */
	bpf_program__set_autoload(skel->progs.generic_entry, multi);
	bpf_program__set_autoload(skel->progs.generic_exit, multi);
	bpf_program__set_autoload(skel->progs.entry_vfs_fallocate, !multi);
	bpf_program__set_autoload(skel->progs.exit_vfs_fallocate, !multi);
	bpf_program__set_autoload(skel->progs.entry_make_kuid, !multi);
	bpf_program__set_autoload(skel->progs.exit_make_kuid, !multi);
	bpf_program__set_autoload(skel->progs.entry_shmem_file_llseek, !multi);
	bpf_program__set_autoload(skel->progs.exit_shmem_file_llseek, !multi);
	err = trace_bpf__load(skel);
	if (err) {
		fprintf(stderr, "trace: the kernel refused the BPF programs: %s\n", strerror(-err));
		goto out;
	}
	err = multi ? attach_multi(skel) : trace_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "trace: cannot attach%s: %s\n",
			multi ? " (kprobe_multi needs Linux 5.18+ with CONFIG_FPROBE)" : "",
			strerror(-err));
		goto out;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
	if (!rb || ring_buffer__add(rb, bpf_map__fd(skel->maps.records), on_record, NULL)) {
		err = -errno;
		fprintf(stderr, "trace: ring buffer: %s\n", strerror(errno));
		goto out;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	fprintf(stderr, "tracing %s\n", multi ? "with the generic decoder (kprobe_multi)"
					     : "with the typed decoders (kprobes)");
	if (child) {
		if (write(go[1], "g", 1) != 1)
			perror("write");
		close(go[1]);
	}
	until = duration > 0 ? time(NULL) + (time_t)duration : 0;
	while (!stop) {
		ring_buffer__poll(rb, 100);
		if (child && waitpid(child, &status, WNOHANG) == child)
			break;
		if (until && time(NULL) >= until)
			break;
	}
	ring_buffer__consume(rb); /* what the command did last */
	if (skel->bss->lost)
		fprintf(stderr, "trace: %llu records lost (ring buffer full)\n",
			(unsigned long long)skel->bss->lost);
out:
	if (child && err) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	ring_buffer__free(rb);
	trace_bpf__destroy(skel);
	if (err)
		return 1;
	return child && WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}
