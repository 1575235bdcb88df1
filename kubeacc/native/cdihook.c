/* kubeacc-cdi-hook: kube-acc's CDI createContainer hook.
 *
 *   kubeacc-cdi-hook update-ldcache [--ldconfig PATH] [--ldconfig-timeout SECONDS] --folder DIR...
 *                   [--link TARGET::/LINK...]
 *
 * runc runs it as root with every capability, in the container's mount namespace after the
 * mounts and before the switch to the container's root, with the container's state (JSON) on
 * stdin. Everything of the container (its image, its volumes, files another container of the
 * pod can change meanwhile) is hostile input here; the hook is built so that none of it can run
 * as the hook or reach outside the container's root (docs/security.md, "Node-side threat model"):
 *
 * - It is a static program that reads no environment variable (an LD_PRELOAD meant for the
 *   container changes nothing), and it runs no program of the image: the ldconfig it runs is
 *   kube-acc's own (--ldconfig, copied by the agent from its image; else the host's), opened
 *   and copied into a sealed memfd before anything of the container is touched, and refused
 *   unless it is a root-owned, static ELF (a dynamic one would load the image's C library).
 * - Every path it creates, writes or links in the container is resolved by the kernel inside
 *   the container's root (openat2 with RESOLVE_IN_ROOT: an absolute or ../ symbolic link is
 *   followed as the container would see it, never out), then written by name relative to the
 *   directory found (a file under a temporary name with O_EXCL|O_NOFOLLOW, renamed into place;
 *   a link made the same way), so a planted link is replaced, never followed. A directory that
 *   turns out to be a kernel file system (proc, sysfs, cgroup, ...) is refused.
 * - ldconfig runs in a mount namespace of its own whose root is the container's root (the host
 *   is unmounted from it; its /proc, /sys and /dev are covered by empty tmpfs), as nobody
 *   (65534) with no capability, no_new_privs, no environment, no descriptor of the runtime and
 *   limits on CPU, file size and time (--ldconfig-timeout, 30 s by default). It writes the cache only to its own tmpfs; the hook
 *   copies the cache into <root>/etc/ld.so.cache as above. It does not make links (-X): the
 *   links the driver needs are the hook's --link arguments.
 *
 * Any failure fails the container's creation with one line naming the path and the reason:
 * the container does not start, the node is untouched. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

#define MAX_STATE (1 << 20)
#define MAX_CONFIG (32 << 20)
#define MAX_LDCONFIG (32 << 20)
#define MAX_CACHE (64 << 20)
#define MAX_ARGS 64
#define MAX_DEPTH 64
#define NOBODY 65534
/* How long ldconfig may take (--ldconfig-timeout; CPU and wall clock). */
static int ldconfig_seconds = 30;
#define CONF_DIR "/etc/ld.so.conf.d"
#define CONF_NAME "00-kubeacc-driver.conf"
#define CACHE_DIR "/etc"
#define CACHE_NAME "ld.so.cache"
/* ldconfig's output, on the tmpfs of its own namespace. */
#define OUT_DIR "/dev"
#define OUT_CACHE "/dev/ld.so.cache"

static int say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kubeacc-cdi-hook: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* ---- reading: bounded, from a descriptor ------------------------------------------------ */

static char *read_fd(int fd, size_t max, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                errno = EFBIG;
                return NULL;
            }
            char *more = realloc(buf, cap * 2 + 1);
            if (!more) break;
            buf = more;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0) {
            buf[n] = '\0';
            if (len) *len = n;
            return buf;
        }
        n += (size_t)r;
    }
    free(buf);
    errno = ENOMEM;
    return NULL;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* ---- JSON: just enough to find one string value by its keys, escapes decoded ------------- */

struct json {
    const char *p, *end;
    int depth;
};

static void ws(struct json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* A string at j->p into out (NULL: skipped); -1 on bad JSON, a NUL in it, or no room. */
static int jstring(struct json *j, char *out, size_t size) {
    size_t n = 0;
    if (j->p >= j->end || *j->p != '"') return -1;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned c = (unsigned char)*j->p++;
        char enc[4];
        size_t k = 1;
        if (c < 0x20) return -1;
        if (c == '\\') {
            if (j->p >= j->end) return -1;
            char e = *j->p++;
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                if (j->end - j->p < 4 || hex4(j->p, &c) != 0 || c == 0) return -1;
                j->p += 4;
                if (c >= 0xd800 && c <= 0xdbff) {
                    unsigned lo;
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) != 0 ||
                        lo < 0xdc00 || lo > 0xdfff)
                        return -1;
                    j->p += 6;
                    c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
                }
                break;
            default: return -1;
            }
        }
        if (c < 0x80) enc[0] = (char)c;
        else if (c < 0x800) enc[0] = (char)(0xc0 | c >> 6), enc[1] = (char)(0x80 | (c & 0x3f)), k = 2;
        else if (c < 0x10000)
            enc[0] = (char)(0xe0 | c >> 12), enc[1] = (char)(0x80 | (c >> 6 & 0x3f)),
            enc[2] = (char)(0x80 | (c & 0x3f)), k = 3;
        else
            enc[0] = (char)(0xf0 | c >> 18), enc[1] = (char)(0x80 | (c >> 12 & 0x3f)),
            enc[2] = (char)(0x80 | (c >> 6 & 0x3f)), enc[3] = (char)(0x80 | (c & 0x3f)), k = 4;
        if (out) {
            if (n + k >= size) return -1;
            memcpy(out + n, enc, k);
        }
        n += k;
    }
    if (j->p >= j->end) return -1;
    j->p++;
    if (out) out[n] = '\0';
    return 0;
}

static int jvalue(struct json *j);

static int jcontainer(struct json *j, char open, char close) {
    if (++j->depth > MAX_DEPTH) return -1;
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return 0;
    }
    for (;;) {
        ws(j);
        if (open == '{') {
            if (jstring(j, NULL, 0) != 0) return -1;
            ws(j);
            if (j->p >= j->end || *j->p++ != ':') return -1;
        }
        if (jvalue(j) != 0) return -1;
        ws(j);
        if (j->p >= j->end) return -1;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p++ != close) return -1;
        j->depth--;
        return 0;
    }
}

static int jvalue(struct json *j) {
    ws(j);
    if (j->p >= j->end) return -1;
    switch (*j->p) {
    case '"': return jstring(j, NULL, 0);
    case '{': return jcontainer(j, '{', '}');
    case '[': return jcontainer(j, '[', ']');
    default: {
        const char *s = j->p;
        while (j->p < j->end && *j->p && strchr("+-.0123456789eEtrufalsn", *j->p)) j->p++;
        return j->p > s ? 0 : -1;
    }
    }
}

/* With j->p at an object: j->p at the value of its member `key` (0), or -1. */
static int jmember(struct json *j, const char *key) {
    char name[256];
    ws(j);
    if (j->p >= j->end || *j->p != '{') return -1;
    j->p++;
    for (;;) {
        ws(j);
        if (j->p < j->end && *j->p == '}') return -1;
        if (jstring(j, name, sizeof name) != 0) return -1;
        ws(j);
        if (j->p >= j->end || *j->p++ != ':') return -1;
        ws(j);
        if (strcmp(name, key) == 0) return 0;
        if (jvalue(j) != 0) return -1;
        ws(j);
        if (j->p < j->end && *j->p == ',') j->p++;
    }
}

/* The string at doc.k1[.k2] into out. */
static int jfind(const char *doc, size_t len, const char *k1, const char *k2, char *out, size_t size) {
    struct json j = {doc, doc + len, 0};
    if (jmember(&j, k1) != 0) return -1;
    if (k2 && jmember(&j, k2) != 0) return -1;
    ws(&j);
    return jstring(&j, out, size);
}

/* ---- the container's root -------------------------------------------------------------- */

static int root_path(char *rootfs, size_t size) {
    size_t len;
    char *state = read_fd(0, MAX_STATE, &len);
    char bundle[PATH_MAX], root[PATH_MAX], config[PATH_MAX + 16];
    if (!state || jfind(state, len, "bundle", NULL, bundle, sizeof bundle) != 0 || bundle[0] != '/') {
        free(state);
        return say("no \"bundle\" in the container state on stdin");
    }
    free(state);
    snprintf(config, sizeof config, "%s/config.json", bundle);
    int fd = open(config, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return say("cannot open %s: %s", config, strerror(errno));
    char *doc = read_fd(fd, MAX_CONFIG, &len);
    close(fd);
    if (!doc) return say("cannot read %s: %s", config, strerror(errno));
    int found = jfind(doc, len, "root", "path", root, sizeof root);
    free(doc);
    if (found != 0 || !root[0]) return say("no root.path in %s", config);
    int n = root[0] == '/' ? snprintf(rootfs, size, "%s", root) : snprintf(rootfs, size, "%s/%s", bundle, root);
    if (n < 0 || (size_t)n >= size) return say("root path too long in %s", config);
    return 0;
}

static int openat2_(int dirfd, const char *path, uint64_t flags, uint64_t resolve) {
    struct open_how how = {.flags = flags, .mode = 0, .resolve = resolve};
    /* RESOLVE_IN_ROOT answers EAGAIN when a rename ran anywhere on the system during the walk
       (the kernel cannot prove the walk stayed inside): a busy node sees that; try again. */
    for (int tries = 0;; tries++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN || tries >= 64) return fd;
    }
}

#define IN_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

/* Kernel file systems no file of the hook may land in. */
static const char *pseudo_fs(int fd) {
    struct statfs st;
    if (fstatfs(fd, &st) != 0) return "unknown (fstatfs failed)";
    switch ((unsigned long)st.f_type) {
    case PROC_SUPER_MAGIC: return "proc";
    case SYSFS_MAGIC: return "sysfs";
    case CGROUP_SUPER_MAGIC: return "cgroup";
    case CGROUP2_SUPER_MAGIC: return "cgroup2";
    case SECURITYFS_MAGIC: return "securityfs";
    case DEBUGFS_MAGIC: return "debugfs";
    case TRACEFS_MAGIC: return "tracefs";
    case BPF_FS_MAGIC: return "bpf";
    case EFIVARFS_MAGIC: return "efivarfs";
    case DEVPTS_SUPER_MAGIC: return "devpts";
    case SELINUX_MAGIC: return "selinuxfs";
    case SMACK_MAGIC: return "smackfs";
    case PSTOREFS_MAGIC: return "pstore";
    case 0x62656570UL: return "configfs";
    case 0x19800202UL: return "mqueue";
    case 0x65735543UL: return "fusectl";
    default: return NULL;
    }
}

/* `path` (absolute, in the container) opened as a directory inside `rootfd`, made (0755, one
 * component at a time) where missing; -1 with a message naming the path otherwise. */
static int dir_in_root(int rootfd, const char *path) {
    const uint64_t how = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    int fd = openat2_(rootfd, path, how, IN_ROOT);
    if (fd < 0 && errno == ENOSYS) return say("this kernel has no openat2 (Linux 5.6 or later is needed)");
    if (fd < 0 && errno == ENOENT) {
        char prefix[PATH_MAX];
        size_t len = strlen(path);
        if (len >= sizeof prefix) return say("%s: path too long", path);
        for (size_t i = 1; i <= len; i++) {
            if (i < len && path[i] != '/') continue;
            memcpy(prefix, path, i);
            prefix[i] = '\0';
            int step = openat2_(rootfd, prefix, how, IN_ROOT);
            if (step >= 0) {
                close(step);
                continue;
            }
            if (errno != ENOENT) return say("%s in the container: %s", prefix, strerror(errno));
            char *slash = strrchr(prefix, '/');
            *slash = '\0';
            int parent = openat2_(rootfd, prefix[0] ? prefix : "/", how, IN_ROOT);
            if (parent < 0) return say("%s in the container: %s", prefix[0] ? prefix : "/", strerror(errno));
            const char *why = pseudo_fs(parent);
            int made = why ? -1 : mkdirat(parent, slash + 1, 0755);
            int err = errno;
            close(parent);
            *slash = '/';
            if (why) return say("refused: %s in the container is on %s", prefix, why);
            if (made != 0 && err == EEXIST)
                return say("refused: %s in the container is a symbolic link to a missing directory", prefix);
            if (made != 0) return say("cannot make %s in the container: %s", prefix, strerror(err));
        }
        fd = openat2_(rootfd, path, how, IN_ROOT);
    }
    if (fd < 0) return say("%s in the container: %s", path, strerror(errno));
    const char *why = pseudo_fs(fd);
    if (why) {
        close(fd);
        return say("refused: %s in the container is on %s", path, why);
    }
    return fd;
}

/* Split an absolute container path into its directory and last name (in `dir`, `base`). */
static int split(const char *path, char *dir, size_t size, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1] || (size_t)(slash - path) >= size) return say("bad path %s", path);
    snprintf(dir, size, "%.*s", (int)(slash - path), path);
    if (!dir[0]) snprintf(dir, size, "/");
    *base = slash + 1;
    return 0;
}

static void tmp_name(char *out, size_t size, const char *base) {
    snprintf(out, size, ".%s.kubeacc-%ld", base, (long)getpid());
}

/* `data` as the file `dir`/`base` of the container: written under a new name, renamed over. */
static int put_file(int rootfd, const char *dir, const char *base, const char *data, size_t len) {
    char tmp[NAME_MAX + 1];
    int dfd = dir_in_root(rootfd, dir);
    if (dfd < 0) return -1;
    tmp_name(tmp, sizeof tmp, base);
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("cannot write %s/%s in the container: %s", dir, base, strerror(errno));
        close(dfd);
        return -1;
    }
    int bad = write_all(fd, data, len) != 0 || fchmod(fd, 0644) != 0;
    bad |= close(fd) != 0;
    if (bad || renameat(dfd, tmp, dfd, base) != 0) {
        say("cannot write %s/%s in the container: %s", dir, base, strerror(errno));
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}

/* LINK -> TARGET in the container. A symbolic link already there is replaced (never
 * followed); anything else there (the image's own file, a mounted library) is kept. */
static int make_link(int rootfd, const char *spec) {
    const char *sep = strstr(spec, "::");
    char target[PATH_MAX], dir[PATH_MAX], tmp[NAME_MAX + 1];
    const char *base = NULL;
    if (!sep || sep == spec || sep[2] != '/' || (size_t)(sep - spec) >= sizeof target)
        return say("--link %s: expected TARGET::/LINK", spec);
    snprintf(target, sizeof target, "%.*s", (int)(sep - spec), spec);
    if (split(sep + 2, dir, sizeof dir, &base) != 0) return -1;
    int dfd = dir_in_root(rootfd, dir);
    if (dfd < 0) return -1;
    struct stat st;
    int rc = 0;
    if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISLNK(st.st_mode)) goto out;
    tmp_name(tmp, sizeof tmp, base);
    unlinkat(dfd, tmp, 0);
    if (symlinkat(target, dfd, tmp) != 0 || renameat(dfd, tmp, dfd, base) != 0) {
        rc = say("cannot link %s in the container: %s", sep + 2, strerror(errno));
        unlinkat(dfd, tmp, 0);
    }
out:
    close(dfd);
    return rc;
}

/* ---- ldconfig: kube-acc's own, sealed, sandboxed ---------------------------------------- */

/* A static ELF executable (no program interpreter), checked on the bytes that will run. */
static const char *not_static_elf(const char *img, size_t len) {
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return "is not an ELF program";
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || (eh->e_type != ET_EXEC && eh->e_type != ET_DYN))
        return "is not a 64-bit ELF executable";
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > len ||
        (size_t)eh->e_phnum * sizeof(Elf64_Phdr) > len - eh->e_phoff)
        return "has a damaged ELF header";
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(img + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_INTERP)
            return "is dynamically linked (it would load the container's C library)";
    return NULL;
}

/* `path` as a sealed memfd, or -1 with why not in `why`. */
static int seal_one(const char *path, const char **why) {
    static char err[160];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, sizeof err, "%s", strerror(errno));
        *why = err;
        return -1;
    }
    struct stat st;
    *why = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) *why = "is not a regular file";
    else if (st.st_uid != 0 || (st.st_mode & 022)) *why = "is not owned by root or is writable by others";
    else if (st.st_size > MAX_LDCONFIG) *why = "is too large";
    size_t len = 0;
    char *img = *why ? NULL : read_fd(fd, MAX_LDCONFIG, &len);
    close(fd);
    if (!*why && !img) *why = "cannot be read";
    if (!*why) *why = not_static_elf(img, len);
    int mfd = -1;
    if (!*why) {
        mfd = memfd_create("kubeacc-ldconfig", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
        if (mfd < 0 && errno == EINVAL) /* a kernel before 6.3: every memfd may run */
            mfd = memfd_create("kubeacc-ldconfig", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0 || write_all(mfd, img, len) != 0 ||
            fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
            *why = "cannot be sealed in memory";
    }
    free(img);
    if (*why && mfd >= 0) close(mfd), mfd = -1;
    return mfd;
}

/* The first usable ldconfig of `paths` (a missing or unusable one is skipped: Ubuntu's
 * /sbin/ldconfig is a shell script beside the static /sbin/ldconfig.real), as a sealed memfd;
 * -1 with one line naming each candidate's reason otherwise. */
static int sealed_ldconfig(const char *const *paths, int n) {
    char reasons[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const char *why;
        int mfd = seal_one(paths[i], &why);
        if (mfd >= 0) return mfd;
        int w = snprintf(reasons + used, sizeof reasons - used, "%s%s: %s", i ? "; " : "", paths[i], why);
        if (w > 0 && (size_t)w < sizeof reasons - used) used += (size_t)w;
    }
    if (n == 1) return say("refused: ldconfig %s", reasons);
    return say("refused: no usable ldconfig on the host (%s)", reasons);
}

/* Cover `path` (a directory of the new root) with an empty tmpfs, in this mount namespace. */
static int cover(const char *path, const char *options, unsigned long flags) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
    return mount("tmpfs", path, "tmpfs", flags | MS_NOSUID | MS_NODEV | MS_NOEXEC, options);
}

/* The sandboxed ldconfig itself (never returns). */
static void run_ldconfig(int ldfd, char **folders, int nf) {
    char *argv[MAX_ARGS + 8] = {"ldconfig", "-X", "-C", OUT_CACHE};
    int argc = 4;
    for (int i = 0; i < nf; i++) argv[argc++] = folders[i];
    argv[argc] = NULL;
    char *envp[] = {NULL};
    int null[2];
    struct rlimit cpu = {(rlim_t)ldconfig_seconds, (rlim_t)ldconfig_seconds}, fsize = {MAX_CACHE, MAX_CACHE};
    struct rlimit nofile = {256, 256}, core = {0, 0};
    if (pipe(null) != 0 || dup2(null[0], 0) < 0 || dup2(2, 1) < 0) _exit(say("ldconfig: cannot set up its descriptors"));
    int keep = ldfd < 3 ? 3 : ldfd;
    if (ldfd != keep && dup2(ldfd, keep) < 0) _exit(90);
    if (keep > 3) syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0U);
    syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0U);
    if (setrlimit(RLIMIT_CPU, &cpu) || setrlimit(RLIMIT_FSIZE, &fsize) || setrlimit(RLIMIT_NOFILE, &nofile) ||
        setrlimit(RLIMIT_CORE, &core))
        _exit(say("ldconfig: cannot set its limits: %s", strerror(errno)));
    gid_t gid = NOBODY;
    if (setgroups(1, &gid) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0 ||
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        _exit(say("ldconfig: cannot drop privileges: %s", strerror(errno)));
    syscall(SYS_execveat, keep, "", argv, envp, AT_EMPTY_PATH);
    _exit(say("cannot run ldconfig: %s", strerror(errno)));
}

/* In a child: a private mount namespace rooted at the container's root, ldconfig run there,
 * its cache copied into `out` (a memfd). The exit status: 0 when `out` holds the cache. */
static int ldconfig_child(const char *rootfs, int ldfd, int out, char **folders, int nf) {
    if (unshare(CLONE_NEWNS) != 0) return say("ldconfig: cannot make a mount namespace: %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(rootfs, rootfs, NULL, MS_BIND | MS_REC, NULL) != 0 || chdir(rootfs) != 0 ||
        syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        return say("ldconfig: cannot enter %s: %s", rootfs, strerror(errno));
    cover("/proc", "size=4k,mode=0555", MS_RDONLY);
    cover("/sys", "size=4k,mode=0555", MS_RDONLY);
    if (cover(OUT_DIR, "size=" "128m" ",mode=0700,uid=65534,gid=65534", 0) != 0)
        return say("refused: the container's %s is not a directory (%s)", OUT_DIR, strerror(errno));
    pid_t pid = fork();
    if (pid < 0) return say("cannot fork for ldconfig: %s", strerror(errno));
    if (pid == 0) run_ldconfig(ldfd, folders, nf);
    int status = 0;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd ready = {pidfd, POLLIN, 0};
    int r = 0;
    while (pidfd >= 0 && (r = poll(&ready, 1, ldconfig_seconds * 1000)) < 0 && errno == EINTR) {
    }
    if (pidfd < 0 || r < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return say("cannot wait for ldconfig: %s", strerror(errno));
    }
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return say("ldconfig did not finish in %d s", ldconfig_seconds);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return say("cannot wait for ldconfig: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return say("ldconfig in %s failed (status %d)", rootfs, status);
    int fd = open(OUT_CACHE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    size_t len = 0;
    char *cache = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read_fd(fd, MAX_CACHE, &len) : NULL;
    if (fd >= 0) close(fd);
    if (!cache || write_all(out, cache, len) != 0) return say("ldconfig wrote no cache");
    free(cache);
    return 0;
}

static int ldconfig(int rootfd, const char *rootfs, int ldfd, char **folders, int nf) {
    int out = memfd_create("kubeacc-ld.so.cache", MFD_CLOEXEC);
    if (out < 0) return say("cannot make a memfd: %s", strerror(errno));
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return say("cannot fork for ldconfig: %s", strerror(errno));
    if (pid == 0) _exit(ldconfig_child(rootfs, ldfd, out, folders, nf) == 0 ? 0 : 1);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return say("cannot wait for ldconfig: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    size_t len = 0;
    char *cache = lseek(out, 0, SEEK_SET) == 0 ? read_fd(out, MAX_CACHE, &len) : NULL;
    close(out);
    if (!cache) return say("cannot read ldconfig's cache: %s", strerror(errno));
    int rc = put_file(rootfd, CACHE_DIR, CACHE_NAME, cache, len);
    free(cache);
    return rc;
}

/* ---- arguments --------------------------------------------------------------------------- */

/* An absolute path of plain components: no "..", no ".", no empty one, no newline. */
static int plain_path(const char *p) {
    if (p[0] != '/' || strlen(p) >= PATH_MAX || strchr(p, '\n')) return 0;
    for (const char *c = p + 1; *c; ) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) return 0;
        c += n + (e ? 1 : 0);
        if (e && !*c) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    char *folders[MAX_ARGS], *links[MAX_ARGS];
    const char *ldpaths[4] = {"/sbin/ldconfig", "/sbin/ldconfig.real", "/usr/sbin/ldconfig",
                              "/usr/sbin/ldconfig.real"};
    int nf = 0, nl = 0, nld = 4;
    clearenv();
    if (argc < 2 || strcmp(argv[1], "update-ldcache") != 0) {
        fputs("usage: kubeacc-cdi-hook update-ldcache [--ldconfig PATH] [--ldconfig-timeout S] --folder DIR... "
              "[--link TARGET::/LINK...]\n",
              stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        int more = i + 1 < argc;
        if (more && strcmp(argv[i], "--folder") == 0 && nf < MAX_ARGS) folders[nf++] = argv[++i];
        else if (more && strcmp(argv[i], "--link") == 0 && nl < MAX_ARGS) links[nl++] = argv[++i];
        else if (more && strcmp(argv[i], "--ldconfig") == 0) ldpaths[0] = argv[++i], nld = 1;
        else if (more && strcmp(argv[i], "--ldconfig-timeout") == 0) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 600) return say("--ldconfig-timeout %s: expected 1-600 seconds", argv[i]), 2;
            ldconfig_seconds = (int)v;
        }
        else {
            say("unexpected argument %s", argv[i]);
            return 2;
        }
    }
    for (int i = 0; i < nf; i++)
        if (!plain_path(folders[i])) return say("--folder %s: expected an absolute path of plain names", folders[i]), 2;
    for (int i = 0; i < nl; i++) {
        const char *sep = strstr(links[i], "::");
        if (!sep || sep == links[i] || !plain_path(sep + 2) || memchr(links[i], '\n', (size_t)(sep - links[i])))
            return say("--link %s: expected TARGET::/LINK", links[i]), 2;
    }
    /* kube-acc's own ldconfig first: nothing of the container is open yet. */
    int ldfd = sealed_ldconfig(ldpaths, nld);
    if (ldfd < 0) return 1;
    char rootfs[PATH_MAX];
    if (root_path(rootfs, sizeof rootfs) != 0) return 1;
    int rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) return say("cannot open the container's root %s: %s", rootfs, strerror(errno)), 1;
    char conf[MAX_ARGS * (PATH_MAX + 1)];
    size_t len = 0;
    for (int i = 0; i < nf; i++) len += (size_t)sprintf(conf + len, "%s\n", folders[i]);
    if (put_file(rootfd, CONF_DIR, CONF_NAME, conf, len) != 0) return 1;
    for (int i = 0; i < nl; i++)
        if (make_link(rootfd, links[i]) != 0) return 1;
    return ldconfig(rootfd, rootfs, ldfd, folders, nf) == 0 ? 0 : 1;
}
