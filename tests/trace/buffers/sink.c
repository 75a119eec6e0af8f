/* Hands take() buffers of 2,000 and 5,000 bytes: one fits --value-size 4093 whole, the other is
 * cut there (tests/trace/test_buffers_live.py). Byte i of each is 'a' + i % 26. */
#include "sink.h"

static unsigned char data[5000];

__attribute__((noinline)) long take(const unsigned char *buf, unsigned long n)
{
	long sum = 0;

	for (unsigned long i = 0; i < n; i++)
		sum += buf[i];
	__asm__ volatile("" : "+r"(sum)); /* the call is kept, its work not folded away */
	return sum;
}

int main(void)
{
	for (unsigned i = 0; i < sizeof(data); i++)
		data[i] = 'a' + i % 26;
	return (take(data, 2000) + take(data, 5000)) == 0;
}
