/* A TLS client that reads its response through SSL_read_ex (curl uses SSL_read). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char req[256], buf[16384];
	size_t n = 0, wrote = 0;
	struct sockaddr_in a = { .sin_family = AF_INET };
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (argc != 3)
		return 2;
	a.sin_port = htons(atoi(argv[1]));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ctx || fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return 1;
	ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		return 1;
	snprintf(req, sizeof(req), "GET /%s HTTP/1.0\r\n\r\n", argv[2]);
	if (!SSL_write_ex(ssl, req, strlen(req), &wrote))
		return 1;
	while (SSL_read_ex(ssl, buf, sizeof(buf), &n))
		fwrite(buf, 1, n, stdout);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
	return 0;
}
