/* `btfgen trace --count / --latency [--by KEY]`: summaries kept in the kernel, included by
 * trace.bpf.c when the build defines BTFGEN_SUMMARY (btfgen/trace/build.py; the run side reads
 * the maps: btfgen/probe/summary.py). Nothing goes to the ring buffer for a call unless
 * sum_mode says SUM_EVENTS too (--record beside a summary).
 *
 * A call's key is its function (the attach cookie's index) and, per function (sum_keys, in
 * cookie order), the thread's comm, or up to SUM_PARTS parts, each bytes of the record the
 * generic decoder wrote at entry (an argument's value or a member of it, a capture's head and
 * bytes: a string's up to its NUL) or at exit (the return value), so the key is decoded by the
 * same Python decoder that decodes the records. Counts and histograms are
 * per-CPU hashes (a plain add: no atomics, which 32-bit JITs may lack), summed by user space;
 * a key that finds the map full is counted, never dropped silently.
 *
 * Latency needs the entry's time at the exit. Where the kernel keeps a word per call for the
 * program (a session link's cookie) and the key is not in the entry's record, the cookie holds
 * the entry's time. Otherwise (a pair of links, or a key from the record, or the record sent
 * too: the generic decoder owns the cookie then) the entry pushes its time and key on a
 * per-thread stack (thread, depth), and every exit pops: an entry the filter rejects pushes a
 * zero time, so the exits its calls make still pop their own slot. An exit that finds no slot
 * is not timed, and counted.
 *
 * A count is added at entry, where the exit is not needed at all (a session entry returns 1, a
 * pair or single probes attach the entry alone: the run side asks the manifest), except for a
 * function whose filter tests its return value (SUM_AT_EXIT in its keyspec): its entry keeps
 * the key and a time as --latency's does, and its exit counts it if the filter keeps it. */
#ifndef BTFGEN_SUMMARY_H
#define BTFGEN_SUMMARY_H
/* The calls record() makes are subprograms (noinline): the verifier then sees the
 * decoder after them from one state, not from each path through the summary (inlined, they
 * took the session program past its million instructions). */

#ifndef BTFGEN_SUMMARY_KEY
#define BTFGEN_SUMMARY_KEY 8 /* key bytes after the function: build.py sizes it */
#endif
#ifndef BTFGEN_SUMMARY_CALLS
#define BTFGEN_SUMMARY_CALLS 16384 /* calls under way at once, on the stack path */
#endif

/* struct sum_keyspec's how (btfgen/probe/summary.py: KEY_*) */
#define SUM_RECORD 1 /* bytes [off, off + size) of the entry's record data */
#define SUM_STRING 2 /* ... a captured string: its head's len says how many bytes are its */
#define SUM_CAPTURE 4 /* ... a capture: its head's pad and pointer are not part of the key */
#define SUM_COMM 8 /* the thread's comm */
#define SUM_AT_EXIT 16 /* the function's calls are counted at exit: a filter decides there */
#define SUM_RETVAL 32 /* bytes [off, off + size) of the exit's record: the key is made at exit */
/* sum_mode[0] */
#define SUM_COUNT 1
#define SUM_LATENCY 2
#define SUM_EVENTS 4 /* the events are sent as well (--record) */
/* sum_stats */
#define SUM_COUNTS_FULL 0 /* calls whose key found the counts map full */
#define SUM_HISTS_FULL 1 /* durations whose key found the histogram map full */
#define SUM_NO_ENTRY 2 /* exits without their entry's time: not timed */
#define SUM_NO_ROOM 3 /* entries whose time could not be kept (the stack map full) */

struct sum_key {
	__u32 fid;
	__u32 zero;
	__u64 failed; /* the record's failed bits of the key's own operations */
	__u8 bytes[BTFGEN_SUMMARY_KEY];
};

#define SUM_PARTS 4 /* parts of one function's key (--by 'F: a, b') */

struct sum_keypart {
	__u16 off; /* in the record's data */
	__u16 size; /* at most */
	__u16 how; /* SUM_RECORD or SUM_RETVAL, with SUM_STRING, SUM_CAPTURE; 0: no part */
	__u16 dst; /* where in the key's bytes */
	__u64 mask; /* the record's failed bits of the part's own operations */
};

struct sum_keyspec {
	__u16 how; /* the parts' how together, and SUM_COMM, SUM_AT_EXIT */
	__u16 pad[3];
	struct sum_keypart part[SUM_PARTS];
};

struct sum_hist {
	__u64 total_ns;
	__u64 slot[64]; /* slot b: durations of 2^b to 2^(b+1)-1 ns (0 and 1 in slot 0) */
};

struct sum_state {
	__u64 ns; /* 0: the entry was not wanted */
	struct sum_key key;
};

struct sum_stack_key {
	__u64 pid_tgid;
	__u32 depth;
	__u32 pad;
};

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, BTFGEN_TRACE_MAX_FUNCTIONS); /* run side: one a function */
	__type(key, __u32);
	__type(value, struct sum_keyspec);
} sum_keys SEC(".maps");

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sum_mode SEC(".maps");

struct {
	__uint(type, 6 /* BPF_MAP_TYPE_PERCPU_ARRAY */);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[2 * BTFGEN_SUMMARY_KEY]);
} sum_scratch SEC(".maps");

struct {
	__uint(type, 5 /* BPF_MAP_TYPE_PERCPU_HASH */);
	__uint(max_entries, 10240); /* run side: --map-size */
	__type(key, struct sum_key);
	__type(value, __u64);
} sum_counts SEC(".maps");

struct {
	__uint(type, 5 /* BPF_MAP_TYPE_PERCPU_HASH */);
	__uint(max_entries, 10240); /* run side: --map-size */
	__type(key, struct sum_key);
	__type(value, struct sum_hist);
} sum_hists SEC(".maps");

struct {
	__uint(type, 6 /* BPF_MAP_TYPE_PERCPU_ARRAY */);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} sum_stats SEC(".maps");

struct {
	__uint(type, 1 /* BPF_MAP_TYPE_HASH */);
	__uint(max_entries, BTFGEN_SUMMARY_CALLS);
	__type(key, struct sum_stack_key);
	__type(value, struct sum_state);
} sum_calls SEC(".maps");

struct {
	__uint(type, 1 /* BPF_MAP_TYPE_HASH */);
	__uint(max_entries, BTFGEN_SUMMARY_CALLS);
	__type(key, __u64);
	__type(value, __u32);
} sum_depth SEC(".maps");

static const struct sum_hist sum_zero_hist;
static const struct sum_state sum_zero_state;

static __always_inline void sum_stat(__u32 at)
{
	__u64 *n = bpf_map_lookup_elem(&sum_stats, &at);

	if (n)
		*n += 1;
}

static __always_inline __u32 sum_mode_now(void)
{
	__u32 zero = 0, *m = bpf_map_lookup_elem(&sum_mode, &zero);

	return m ? *m : 0;
}

/* floor(log2(v)), 0 for 0 and 1: the histogram's slot. */
static __always_inline __u32 sum_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r;
}

/* One part's bytes of a decoded record into `to` (the key's bytes at the part's place). */
static __always_inline void sum_fill_part(__u8 *to, const struct sum_keypart *kp,
					  const struct btfgen_record *rec)
{
	const __u8 *from;
	__u32 n;

	/* a value or capture head starts below BTFGEN_OP_LIMIT (generic.py): its head fits */
	from = &rec->data[kp->off & (BTFGEN_OP_LIMIT - 1)];
	n = kp->size;
	if (kp->how & SUM_CAPTURE) {
		/* A capture not read (a NULL or faulting pointer) has only its head. */
		if (from[0] != 1)
			n = 16;
		else if (kp->how & SUM_STRING)
			n = 16 + *(const __u16 *)(from + 4);
	}
	if (n > kp->size)
		n = kp->size;
	if (n > BTFGEN_SUMMARY_KEY)
		n = BTFGEN_SUMMARY_KEY;
	bpf_probe_read_kernel(to, n, from);
#if BTFGEN_SUMMARY_KEY >= 16
	if (kp->how & SUM_CAPTURE) {
		/* the head's pads and the pointer in hand differ from call to call */
		to[3] = 0;
		to[6] = 0;
		to[7] = 0;
		__builtin_memset(&to[8], 0, 8);
	}
#endif
}

/* The key's parts made of a decoded record: `want` SUM_RECORD for the entry's, SUM_RETVAL for
 * the exit's. The parts are put together in a per-CPU scratch twice the key's size, so that a
 * part's place (known only at run time) and its size each stay within bounds the verifier can
 * see; the key's bytes are copied in first (the entry's parts, at the exit) and back after. */
static __always_inline void sum_fill_bytes(struct sum_key *k, const struct sum_keyspec *ks,
					   const struct btfgen_record *rec, __u32 want)
{
	__u32 zero = 0, i, dst;
	__u8 *scratch = bpf_map_lookup_elem(&sum_scratch, &zero);

	if (!scratch)
		return;
	bpf_probe_read_kernel(scratch, BTFGEN_SUMMARY_KEY, k->bytes);
	for (i = 0; i < SUM_PARTS; i++) {
		const struct sum_keypart *kp = &ks->part[i];

		if (!(kp->how & want))
			continue;
		k->failed |= rec->failed & kp->mask; /* entry and exit ops have their own bits */
		dst = kp->dst;
		if (dst >= BTFGEN_SUMMARY_KEY)
			continue;
		sum_fill_part(scratch + dst, kp, rec);
	}
	bpf_probe_read_kernel(k->bytes, BTFGEN_SUMMARY_KEY, scratch);
}

/* `k` (zeroed) made the key of function `at`'s call; `rec`: its entry's decoded record. A
 * SUM_RETVAL key gets its bytes at the exit (sum_exit). */
static __always_inline void sum_fill(struct sum_key *k, __u32 at, const struct sum_keyspec *ks,
				     const struct btfgen_record *rec)
{
	k->fid = at;
	if (!ks)
		return;
#if BTFGEN_SUMMARY_KEY >= 16
	if (ks->how & SUM_COMM) {
		bpf_get_current_comm(k->bytes, 16);
		return;
	}
#endif
	if (!(ks->how & SUM_RECORD) || !rec)
		return;
	sum_fill_bytes(k, ks, rec, SUM_RECORD);
}

/* Whether a call's exit has work: its duration, or its count where a filter on the return
 * value decides (the entry then keeps the call's key and a nonzero time for the exit). */
static __always_inline int sum_needs_exit(const struct sum_keyspec *ks, __u32 mode)
{
	return (mode & SUM_LATENCY) || (ks && (ks->how & SUM_AT_EXIT));
}

/* Whether the entry counts the call (--count, and no filter left to run at exit). */
static __always_inline int sum_counts_at_entry(const struct sum_keyspec *ks, __u32 mode)
{
	return (mode & SUM_COUNT) && !(ks && (ks->how & SUM_AT_EXIT));
}

static __always_inline void sum_count(const struct sum_key *k)
{
	__u64 *n = bpf_map_lookup_elem(&sum_counts, k), one = 1;

	if (n) {
		*n += 1;
		return;
	}
	if (!bpf_map_update_elem(&sum_counts, k, &one, 1 /* BPF_NOEXIST */))
		return;
	n = bpf_map_lookup_elem(&sum_counts, k); /* another CPU made it first */
	if (n)
		*n += 1;
	else
		sum_stat(SUM_COUNTS_FULL);
}

static __always_inline void sum_time(const struct sum_key *k, __u64 ns)
{
	struct sum_hist *h = bpf_map_lookup_elem(&sum_hists, k);

	if (!h) {
		bpf_map_update_elem(&sum_hists, k, &sum_zero_hist, 1 /* BPF_NOEXIST */);
		h = bpf_map_lookup_elem(&sum_hists, k);
		if (!h) {
			sum_stat(SUM_HISTS_FULL);
			return;
		}
	}
	h->slot[sum_log2(ns) & 63] += 1;
	h->total_ns += ns;
}

/* The entry's time rides in the session cookie: a session link, a key that is not in a
 * record (the exit's decoder, for a SUM_RETVAL key, reads its carried pointer there), and no
 * record sent. */
static __always_inline int sum_in_cookie(const struct sum_keyspec *ks, __u32 mode)
{
#ifdef BTFGEN_SESSION
	return !(mode & SUM_EVENTS) && !(ks && (ks->how & (SUM_RECORD | SUM_RETVAL)));
#else
	return 0;
#endif
}

/* A slot on this thread's stack of calls, zeroed; NULL: none (counted). */
static __always_inline struct sum_state *sum_push(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 *d = bpf_map_lookup_elem(&sum_depth, &id);
	struct sum_stack_key key = { .pid_tgid = id, .depth = d ? *d : 0 };
	__u32 next = key.depth + 1;
	struct sum_state *st;

	if (bpf_map_update_elem(&sum_calls, &key, &sum_zero_state, 0 /* BPF_ANY */) ||
	    bpf_map_update_elem(&sum_depth, &id, &next, 0 /* BPF_ANY */)) {
		sum_stat(SUM_NO_ROOM);
		return 0;
	}
	st = bpf_map_lookup_elem(&sum_calls, &key);
	if (!st)
		sum_stat(SUM_NO_ROOM);
	return st;
}

/* The top of this thread's stack into `out`, popped; 0: there was none. */
static __always_inline int sum_pop(struct sum_state *out)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 *d = bpf_map_lookup_elem(&sum_depth, &id);
	struct sum_stack_key key = { .pid_tgid = id };
	struct sum_state *st;

	if (!d || !*d)
		return 0;
	key.depth = *d - 1;
	*d = key.depth;
	st = bpf_map_lookup_elem(&sum_calls, &key);
	if (!st)
		return 0;
	__builtin_memcpy(out, st, sizeof(*out));
	bpf_map_delete_elem(&sum_calls, &key);
	return 1;
}

/* An entry the filter wanted (`rec`: its decoded record, where the key is in it). */
static __always_inline void sum_entry(void *ctx, __u32 at, const struct sum_keyspec *ks,
				      const struct btfgen_record *rec, __u32 mode)
{
	struct sum_key k = {};
	struct sum_state *st;

	if (!sum_needs_exit(ks, mode)) {
		sum_fill(&k, at, ks, rec);
		sum_count(&k);
		return;
	}
	if (sum_in_cookie(ks, mode)) {
#ifdef BTFGEN_SESSION
		*btfgen_session_cookie(ctx) = bpf_ktime_get_ns();
#endif
		if (sum_counts_at_entry(ks, mode)) {
			sum_fill(&k, at, ks, rec);
			sum_count(&k);
		}
		return;
	}
	st = sum_push();
	if (!st) {
		/* counted at exit, this call is not: SUM_NO_ROOM says so */
		if (sum_counts_at_entry(ks, mode)) {
			sum_fill(&k, at, ks, rec);
			sum_count(&k);
		}
		return;
	}
	sum_fill(&st->key, at, ks, rec);
	if (sum_counts_at_entry(ks, mode))
		sum_count(&st->key);
	st->ns = bpf_ktime_get_ns(); /* last: the time is the call's, not the key's making */
}

/* An exit: `wanted`, what the filter said of it; `rec`, its decoded record where the key is
 * made of it (SUM_RETVAL), else 0. */
static __always_inline void sum_exit(void *ctx, __u32 at, const struct sum_keyspec *ks,
				     __u32 mode, int wanted, const struct btfgen_record *rec)
{
	__u64 now = bpf_ktime_get_ns();
	struct sum_state st = {};

	if (!sum_needs_exit(ks, mode))
		return;
	if (sum_in_cookie(ks, mode)) {
#ifdef BTFGEN_SESSION
		st.ns = *btfgen_session_cookie(ctx);
#endif
		/* 0: no entry ran (an fsession's, skipped); the mark: one that kept no time */
		if (!wanted || !st.ns || st.ns == TRACE_ENTRY_SEEN)
			return;
		sum_fill(&st.key, at, ks, 0);
	} else if (!sum_pop(&st)) {
		if (wanted)
			sum_stat(SUM_NO_ENTRY);
		return;
	} else if (!wanted || !st.ns) {
		return;
	} else if (st.key.fid != at) {
		/* an exit whose entry this thread's stack never saw (a missed entry): not timed */
		sum_stat(SUM_NO_ENTRY);
		return;
	}
	if (rec)
		sum_fill_bytes(&st.key, ks, rec, SUM_RETVAL);
	if ((mode & SUM_COUNT) && !sum_counts_at_entry(ks, mode))
		sum_count(&st.key);
	if (mode & SUM_LATENCY)
		sum_time(&st.key, now - st.ns);
}

/* Before the record is decoded. 1: the call is summed and sends no event (its entry's exit
 * is still needed only for --latency: trace_session returns it). */
static __noinline int summary_early(void *ctx, __u32 at, __u32 kind)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);
	__u32 mode = sum_mode_now();

	if (kind) {
		if (ks && (ks->how & SUM_RETVAL))
			return 0; /* summary_exit, once decoded */
		sum_exit(ctx, at, ks, mode, 1, 0);
		return !(mode & SUM_EVENTS);
	}
	if (ks && (ks->how & SUM_RECORD))
		return 0; /* summary_entry, once decoded */
	sum_entry(ctx, at, ks, 0, mode);
	return !(mode & SUM_EVENTS);
}

/* After the entry's record is decoded: the keys made of it. 1: no event to send. */
static __noinline int summary_entry(void *ctx, __u32 at, const struct btfgen_record *rec)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);
	__u32 mode = sum_mode_now();

	if (!ks || !(ks->how & SUM_RECORD))
		return 0;
	sum_entry(ctx, at, ks, rec, mode);
	return !(mode & SUM_EVENTS);
}

/* After the exit's record is decoded: a key made of it. 1: no event to send. */
static __noinline int summary_exit(void *ctx, __u32 at, const struct btfgen_record *rec)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);
	__u32 mode = sum_mode_now();

	if (!ks || !(ks->how & SUM_RETVAL))
		return 0;
	sum_exit(ctx, at, ks, mode, 1, rec);
	return !(mode & SUM_EVENTS);
}

/* A call the filter rejected: its entry pushes a zero time where its exit will pop one. */
static __noinline void summary_rejected(void *ctx, __u32 at, __u32 kind)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);
	__u32 mode = sum_mode_now();

	if (!sum_needs_exit(ks, mode))
		return;
	if (kind) {
		sum_exit(ctx, at, ks, mode, 0, 0);
		return;
	}
	if (!sum_in_cookie(ks, mode))
		sum_push(); /* its time stays 0 */
}

/* A call whose key is in its record, lost before it was decoded (no scratch): as a rejected
 * one, an entry's exit pops the zero time it pushes (summary_early pushed nothing for it), and
 * an exit whose key is its record's (SUM_RETVAL) pops its entry's slot uncounted. */
static __noinline void summary_lost(void *ctx, __u32 at, __u32 kind)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);

	if (ks && (ks->how & (kind ? SUM_RETVAL : SUM_RECORD)))
		summary_rejected(ctx, at, kind);
}

/* The session entry's return: 1 skips the exit, which a count made at entry does not need. */
static __always_inline int summary_no_exit(__u32 at)
{
	const struct sum_keyspec *ks = bpf_map_lookup_elem(&sum_keys, &at);
	__u32 mode = sum_mode_now();

	return mode && !(mode & SUM_EVENTS) && !sum_needs_exit(ks, mode);
}
#endif /* BTFGEN_SUMMARY_H */
