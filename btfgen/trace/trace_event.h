/* Generated from btfgen/probe/spec_format.py (EVENT_HEAD, MAX_FUNCTIONS) by
 * `python -m btfgen.probe.spec_format`. DO NOT EDIT. */
#ifndef BTFGEN_TRACE_EVENT_H
#define BTFGEN_TRACE_EVENT_H
#define BTFGEN_TRACE_MAX_FUNCTIONS 4096

struct trace_event {
	__u32 tgid;
	__u32 pid; /* the thread: entries and exits are paired by it */
	char comm[16];
	__u64 ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 cpu;
	__u32 flags; /* EVENT_* bits: losses this thread's pairing must know of */
	struct btfgen_record rec;
};
#endif /* BTFGEN_TRACE_EVENT_H */
