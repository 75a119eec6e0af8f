/* Calls nested three deep on two threads, for the exports' browser test
 * (test_live_export_browser.py): outer calls middle calls leaf. */
#include <pthread.h>

long __attribute__((noipa)) leaf(long x) { return x * 3; }

long __attribute__((noipa)) middle(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

long __attribute__((noipa)) outer(int rounds)
{
	long s = 0;
	for (int r = 0; r < rounds; r++)
		s += middle(3);
	return s;
}

static void *worker(void *arg)
{
	(void)arg;
	return (void *)outer(4);
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	long s = outer(5);
	pthread_join(t, 0);
	return s == 45 ? 0 : 1;
}
