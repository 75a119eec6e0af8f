/* The calls test_func_args.py traces with the kernel's func-args printer and btfgen's fprobe
 * module at once: each argument known here, so that both sides can be checked against it too.
 *
 *   do_mmap       (nine arguments: three on the stack on x86_64) by mmap() of a file at a page
 *                 offset (pgoff = PGOFF + i, len = (i + 1) pages), MAPS times;
 *   vfs_symlink   (a kernel char *) by symlink(TARGET, ...);
 *   make_kuid     (returns kuid_t, a struct) and from_vfsuid (takes vfsuid_t, a struct, by value)
 *                 by chown(file, UID, GID);
 *   from_kuid_munged (takes kuid_t by value) by getuid(). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096
#define PGOFF 3
#define MAPS 4
#define TARGET "/btfgen/func-args/symlink-target"
#define UID 1000
#define GID 100

int main(void)
{
	int fd = open("/tmp/func_args", O_CREAT | O_RDWR, 0644);
	int i;

	if (fd < 0 || ftruncate(fd, 16 * PAGE)) {
		perror("/tmp/func_args");
		return 1;
	}
	for (i = 0; i < MAPS; i++) {
		void *p = mmap(NULL, (i + 1) * PAGE, PROT_READ, MAP_SHARED, fd,
			       (off_t)(PGOFF + i) * PAGE);

		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		munmap(p, (i + 1) * PAGE);
	}
	if (symlink(TARGET, "/tmp/func_args_link")) {
		perror("symlink");
		return 1;
	}
	if (chown("/tmp/func_args", UID, GID)) {
		perror("chown");
		return 1;
	}
	printf("uid %d\n", (int)getuid());
	return 0;
}
