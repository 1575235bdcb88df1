/* A stand-in ldconfig (run by the hook through --ldconfig) that reports what it was given
 * instead of a cache: its ids, capabilities, environment, open descriptors and which paths it
 * can see, written to the cache file it was asked for (-C FILE), which the hook then copies
 * into the container's /etc/ld.so.cache. With SPY_HANG set at build time it never ends. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "-C") == 0) out = argv[i + 1];
    if (!out) return 3;
    FILE *f = fopen(out, "w");
    if (!f) return 4;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2] = {{0}};
    syscall(SYS_capget, &h, d);
    fprintf(f, "uid %d %d\ngid %d %d\n", getuid(), geteuid(), getgid(), getegid());
    fprintf(f, "caps %x %x %x\n", d[0].effective | d[1].effective, d[0].permitted | d[1].permitted,
            d[0].inheritable | d[1].inheritable);
    fprintf(f, "nnp %d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    int n = 0;
    for (char **e = environ; *e; e++) n++;
    fprintf(f, "env %d\n", n);
    fprintf(f, "fds");
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0) fprintf(f, " %d", fd);
    fprintf(f, "\nargs");
    for (int i = 1; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "\n");
    static const char *const probes[] = {"/proc/self", "/sys/kernel", "/etc/in-container", SPY_HOST_PATH};
    for (unsigned i = 0; i < sizeof probes / sizeof *probes; i++) {
        struct stat st;
        fprintf(f, "see %s %d\n", probes[i], lstat(probes[i], &st) == 0);
    }
    fclose(f);
#ifdef SPY_HANG
    for (;;) pause();
#endif
    return 0;
}
