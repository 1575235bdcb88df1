/* A library a hostile pod would like preloaded into the hook: its constructor writes the file
 * named by HOSTILE_MARK. */
#include <fcntl.h>
#include <unistd.h>

__attribute__((constructor)) static void mark(void) {
    int fd = open(HOSTILE_MARK, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) close(fd);
}
