/* kubeacc-cdi-hook: kube-acc's CDI createContainer hook.
 *
 *   kubeacc-cdi-hook update-ldcache --folder DIR [--folder DIR...] [--link TARGET::LINK...]
 *
 * The runtime (runc) runs it in the container's mount namespace after the mounts and before
 * the switch to the container's root, with the container's state (JSON) on stdin. It finds the
 * root file system (the bundle's config.json, root.path), and there: writes
 * /etc/ld.so.conf.d/00-kubeacc-driver.conf naming the folders, makes each LINK a symbolic link
 * to TARGET, and runs the container's own ldconfig (chrooted) on the folders. An image without
 * ldconfig (static or musl) needs no ld cache: the hook says so and succeeds. Any other failure
 * fails the container's creation with a message naming the step. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DOC (4 << 20)
#define MAX_ARGS 64

static int fail(const char *what, const char *path) {
    fprintf(stderr, "kubeacc-cdi-hook: %s %s: %s\n", what, path, strerror(errno));
    return 1;
}

/* out = a + b; -1 (and a message) when it does not fit. */
static int join(char *out, size_t size, const char *a, const char *b) {
    int n = snprintf(out, size, "%s%s", a, b);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "kubeacc-cdi-hook: path too long: %s%s\n", a, b);
        return -1;
    }
    return 0;
}

static char *read_all(FILE *f) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
        if (len == cap) {
            if (cap >= MAX_DOC) break;
            char *more = realloc(buf, cap * 2 + 1);
            if (!more) break;
            buf = more;
            cap *= 2;
        }
    }
    if (buf) buf[len] = '\0';
    return buf;
}

/* The JSON string value of the first "key": after `from` (no escapes but \" \\ \/). */
static int string_after(const char *from, const char *key, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    for (const char *p = strstr(from, pattern); p; p = strstr(p + 1, pattern)) {
        const char *q = p + strlen(pattern);
        while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r') q++;
        if (*q++ != ':') continue;
        while (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r') q++;
        if (*q++ != '"') continue;
        size_t n = 0;
        while (*q && *q != '"' && n + 1 < size) {
            if (*q == '\\' && q[1]) q++;
            out[n++] = *q++;
        }
        out[n] = '\0';
        return *q == '"' ? 0 : -1;
    }
    return -1;
}

static int mkdirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return -1;
    }
    return 0;
}

static int root_of(char *rootfs, size_t size) {
    char *state = read_all(stdin);
    char bundle[PATH_MAX], config[PATH_MAX], root[PATH_MAX];
    if (!state || string_after(state, "bundle", bundle, sizeof bundle) != 0) {
        fputs("kubeacc-cdi-hook: no \"bundle\" in the container state on stdin\n", stderr);
        return -1;
    }
    free(state);
    if (join(config, sizeof config, bundle, "/config.json") != 0) return -1;
    FILE *f = fopen(config, "r");
    if (!f) return fail("cannot open", config), -1;
    char *doc = read_all(f);
    fclose(f);
    const char *at = doc ? strstr(doc, "\"root\"") : NULL;
    if (!at || string_after(at, "path", root, sizeof root) != 0) {
        fprintf(stderr, "kubeacc-cdi-hook: no root.path in %s\n", config);
        free(doc);
        return -1;
    }
    free(doc);
    if (root[0] == '/') return join(rootfs, size, root, "");
    char prefix[PATH_MAX];
    if (join(prefix, sizeof prefix, bundle, "/") != 0) return -1;
    return join(rootfs, size, prefix, root);
}

static int write_conf(const char *rootfs, char **folders, int n) {
    char path[PATH_MAX];
    if (join(path, sizeof path, rootfs, "/etc/ld.so.conf.d/00-kubeacc-driver.conf") != 0) return 1;
    if (mkdirs(path) != 0) return fail("cannot make the directory of", path);
    FILE *f = fopen(path, "w");
    if (!f) return fail("cannot write", path);
    for (int i = 0; i < n; i++) fprintf(f, "%s\n", folders[i]);
    if (fclose(f) != 0) return fail("cannot write", path);
    return 0;
}

static int make_link(const char *rootfs, const char *spec) {
    const char *sep = strstr(spec, "::");
    char target[PATH_MAX], path[PATH_MAX];
    if (!sep || sep == spec || sep[2] != '/') {
        fprintf(stderr, "kubeacc-cdi-hook: --link %s: expected TARGET::/LINK\n", spec);
        return 1;
    }
    snprintf(target, sizeof target, "%.*s", (int)(sep - spec), spec);
    if (join(path, sizeof path, rootfs, sep + 2) != 0) return 1;
    if (mkdirs(path) != 0) return fail("cannot make the directory of", path);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) unlink(path);
    if (symlink(target, path) != 0 && errno != EEXIST) return fail("cannot link", path);
    return 0;
}

static int ldconfig(const char *rootfs, char **folders, int n) {
    static const char *const candidates[] = {"/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real"};
    pid_t pid = fork();
    if (pid < 0) return fail("cannot fork for", "ldconfig");
    if (pid == 0) {
        if (chroot(rootfs) != 0 || chdir("/") != 0) _exit(fail("cannot chroot to", rootfs));
        char *argv[MAX_ARGS + 2] = {"ldconfig"};
        for (int i = 0; i < n && i < MAX_ARGS; i++) argv[i + 1] = folders[i];
        for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
            if (access(candidates[i], X_OK) == 0) {
                execv(candidates[i], argv);
                _exit(fail("cannot run", candidates[i]));
            }
        }
        fputs("kubeacc-cdi-hook: the image has no ldconfig; its ld cache is left as it is\n", stderr);
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return fail("cannot wait for", "ldconfig");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "kubeacc-cdi-hook: ldconfig in %s failed (status %d)\n", rootfs, status);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    char *folders[MAX_ARGS];
    char *links[MAX_ARGS];
    int nf = 0, nl = 0;
    if (argc < 2 || strcmp(argv[1], "update-ldcache") != 0) {
        fputs("usage: kubeacc-cdi-hook update-ldcache --folder DIR... [--link TARGET::LINK...]\n", stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        int more = i + 1 < argc;
        if (more && strcmp(argv[i], "--folder") == 0 && nf < MAX_ARGS) folders[nf++] = argv[++i];
        else if (more && strcmp(argv[i], "--link") == 0 && nl < MAX_ARGS) links[nl++] = argv[++i];
        else {
            fprintf(stderr, "kubeacc-cdi-hook: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    char rootfs[PATH_MAX];
    if (root_of(rootfs, sizeof rootfs) != 0) return 1;
    if (write_conf(rootfs, folders, nf) != 0) return 1;
    for (int i = 0; i < nl; i++)
        if (make_link(rootfs, links[i]) != 0) return 1;
    return ldconfig(rootfs, folders, nf);
}
