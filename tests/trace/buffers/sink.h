/* What tests/trace/test_buffers_live.py traces in sink.c. */
long take(const unsigned char *buf, unsigned long n);
