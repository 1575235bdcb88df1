/* kube-acc share-limit library: enforces a GPU share's device-memory limit inside the container.
 *
 * Preloaded (LD_PRELOAD, set by the share's CDI spec) into every process of the container. It
 * interposes the CUDA driver API's allocation entry points and their frees, and reports the limit
 * as the device's total memory in the driver API's and NVML's memory queries. Limits come only
 * from the environment the CDI spec sets (DESIGN.md, "Sharing contract"):
 *
 *   KUBEACC_DEVICE_MEMORY_LIMIT  MiB per unit, comma-separated, in ACCELERATOR_UNITS order
 *   ACCELERATOR_UNITS            the units' PCI bus ids (a CUDA device is matched by its bus id;
 *                                without the variable, by its ordinal)
 *   KUBEACC_SHARELIMIT_SOCKET    the unix socket of the share's account in the agent's
 *                                accounting service (mounted read-only into the container; all
 *                                processes of the container share that account; without it,
 *                                accounting is per process)
 *
 * Fail closed: a malformed variable, a device without a limit or units the account does not
 * have makes every allocation fail with CUDA_ERROR_OUT_OF_MEMORY and one message on stderr; an
 * account that cannot be reached (waited for KUBEACC_SHARELIMIT_WAIT_MS, 30 s) fails that allocation.
 * docs/sharing.md describes the design; tests/native/ runs it against a stand-in driver. */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEV 16
#define MAX_ORDINAL 64
#define PITCH_ALIGN 512

/* ---- configuration (read once) ---- */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev;                        /* 0: no limits set, pass through */
static unsigned long long limit[MAX_DEV]; /* bytes */
static struct { unsigned dom, bus, dev, fn; int ok; } unit[MAX_DEV];
static int have_units;
static char broken[300]; /* non-empty: fail closed, this says why */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* empty: per process */
static int svc_wait_ms = 30000; /* KUBEACC_SHARELIMIT_WAIT_MS: this process's own patience */

/* ---- accounting without a service: this process's own, per device ---- */
static _Atomic unsigned long long local_used[MAX_DEV];
static _Atomic int denials;
static _Atomic int ordinal_index[MAX_ORDINAL]; /* 0 unknown, else index + 1, -1 none */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

static void fail_closed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_closed(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(broken, sizeof broken, fmt, ap);
    va_end(ap);
    say("kubeacc-sharelimit: %s; every GPU memory allocation of this process will fail", broken);
}

/* ---- real functions: the next definition after this library, else libcuda/libnvidia-ml ---- */
enum {
#define X(name, args) IDX_##name,
    KUBEACC_CU_FUNCS(X) KUBEACC_NVML_FUNCS(X)
#undef X
    IDX_cuCtxGetDevice, IDX_cuDeviceGetPCIBusId, IDX_nvmlDeviceGetPciInfo_v3, IDX_N
};
static const char *const real_name[IDX_N] = {
#define X(name, args) #name,
    KUBEACC_CU_FUNCS(X) KUBEACC_NVML_FUNCS(X)
#undef X
    "cuCtxGetDevice", "cuDeviceGetPCIBusId", "nvmlDeviceGetPciInfo_v3"};
static void *_Atomic real_fn[IDX_N];
/* What real_fn holds for a symbol looked up and not found (cuGetProcAddress asks for each
 * covered symbol on every call: a miss must not cost a dlsym each time). */
static char missing_mark;
#define MISSING ((void *)&missing_mark)

/* The C library's dlvsym. This library defines its own dlvsym (below), and the linker binds the
 * library's every reference to that name to it, whatever version it asks for: the C library's
 * is found in its dynamic symbol table (the default version's definition), once. */
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
static int find_libc_dlvsym(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    const char *base = strrchr(info->dlpi_name, '/');
    base = base ? base + 1 : info->dlpi_name;
    if (strncmp(base, "libc.so.", 8) != 0) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    ElfW(Addr) symtab = 0, strtab = 0, gnuhash = 0, hash = 0, versym = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        ElfW(Addr) a = dyn->d_un.d_ptr;
        if (a && a < info->dlpi_addr) a += info->dlpi_addr; /* not relocated by the loader */
        if (dyn->d_tag == DT_SYMTAB) symtab = a;
        else if (dyn->d_tag == DT_STRTAB) strtab = a;
        else if (dyn->d_tag == DT_GNU_HASH) gnuhash = a;
        else if (dyn->d_tag == DT_HASH) hash = a;
        else if (dyn->d_tag == DT_VERSYM) versym = a;
    }
    if (!symtab || !strtab || (!gnuhash && !hash)) return 0;
    uint32_t last = 0;
    if (gnuhash) { /* the number of symbols: past the last chain a GNU hash bucket starts */
        const uint32_t *h = (const uint32_t *)gnuhash;
        uint32_t nbuckets = h[0], symoffset = h[1], bloom = h[2];
        const uint32_t *buckets = h + 4 + bloom * (sizeof(ElfW(Addr)) / 4), *chain = buckets + nbuckets;
        for (uint32_t b = 0; b < nbuckets; b++)
            if (buckets[b] > last) last = buckets[b];
        if (last >= symoffset)
            while (!(chain[last - symoffset] & 1)) last++;
    } else { /* the SysV hash table's chain count is the number of symbols */
        last = ((const uint32_t *)hash)[1] - 1;
    }
    const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab;
    const ElfW(Half) *ver = (const ElfW(Half) *)versym;
    for (uint32_t i = 0; i <= last; i++)
        if (sym[i].st_shndx != SHN_UNDEF && (sym[i].st_info & 0xf) == STT_FUNC &&
            !strcmp((const char *)strtab + sym[i].st_name, "dlvsym") && !(ver && (ver[i] & 0x8000))) {
            *(void **)out = (void *)(info->dlpi_addr + sym[i].st_value);
            return 1;
        }
    return 0;
}
static void *kubeacc_libc_dlvsym(void *handle, const char *name, const char *version) {
    static dlvsym_fn real;
    dlvsym_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!f) {
        void *found = NULL;
        dl_iterate_phdr(find_libc_dlvsym, &found);
        f = (dlvsym_fn)found;
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    return f ? f(handle, name, version) : NULL;
}

/* The C library's dlsym (this library defines its own, below). glibc versions it GLIBC_2.34
 * (x86_64 also GLIBC_2.2.5, aarch64 GLIBC_2.17). */
typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn libc_dlsym(void) {
    static dlsym_fn real;
    dlsym_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (f) return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
        f = (dlsym_fn)kubeacc_libc_dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    return f;
}

static void *resolve(int i) {
    void *p = atomic_load_explicit(&real_fn[i], memory_order_acquire);
    if (p) return p == MISSING ? NULL : p;
    dlsym_fn next = libc_dlsym();
    if (!next) return NULL;
    p = next(RTLD_NEXT, real_name[i]);
    if (!p) {
        const char *lib = real_name[i][0] == 'n' ? "libnvidia-ml.so.1" : "libcuda.so.1";
        void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            p = next(h, real_name[i]);
            dlclose(h);
        }
    }
    atomic_store_explicit(&real_fn[i], p ? p : MISSING, memory_order_release);
    return p;
}

#define X(name, args) typedef CUresult(*name##_fn) args;
KUBEACC_CU_FUNCS(X)
#undef X
#define X(name, args) typedef nvmlReturn_t(*name##_fn) args;
KUBEACC_NVML_FUNCS(X)
#undef X
typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *);
typedef CUresult (*cuDeviceGetPCIBusId_fn)(char *, int, CUdevice);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfo_v3_fn)(nvmlDevice_t, nvmlPciInfo_t *);
#define REAL(name) ((name##_fn)resolve(IDX_##name))
/* Call the real function or answer that the driver is missing. */
#define CALL(name, ...)                                                                          \
    do {                                                                                         \
        name##_fn f_ = REAL(name);                                                               \
        return f_ ? f_(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED;                                \
    } while (0)

/* ---- configuration parsing ---- */
static int parse_bus_id(const char *s, size_t n, unsigned v[4]) {
    char buf[64], tail;
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (sscanf(buf, "%x:%x:%x.%x%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4) return 1;
    v[0] = 0; /* a bus id without a domain */
    return sscanf(buf, "%x:%x.%x%c", &v[1], &v[2], &v[3], &tail) == 3;
}

static void read_config(void) {
    const char *mem = getenv("KUBEACC_DEVICE_MEMORY_LIMIT");
    if (!mem) return; /* no share: nothing to enforce */
    const char *p = mem;
    do {
        if (ndev == MAX_DEV) return fail_closed("KUBEACC_DEVICE_MEMORY_LIMIT: more than %d units", MAX_DEV);
        unsigned long long mib = 0;
        const char *start = p;
        while (*p >= '0' && *p <= '9' && p - start < 12) mib = mib * 10 + (unsigned)(*p++ - '0');
        if (p == start || mib == 0 || (*p && *p != ','))
            return fail_closed("KUBEACC_DEVICE_MEMORY_LIMIT=%.64s: expected positive MiB per unit, "
                               "comma-separated", mem);
        limit[ndev++] = mib << 20;
    } while (*p++ == ',');
    const char *units = getenv("ACCELERATOR_UNITS");
    if (units) {
        int n = 0;
        for (const char *u = units;; n++) {
            size_t len = strcspn(u, ",");
            unsigned v[4];
            if (n < MAX_DEV && parse_bus_id(u, len, v)) {
                unit[n].dom = v[0], unit[n].bus = v[1], unit[n].dev = v[2], unit[n].fn = v[3];
                unit[n].ok = 1;
            }
            if (!u[len]) break;
            u += len + 1;
        }
        if (n + 1 != ndev)
            return fail_closed("ACCELERATOR_UNITS names %d units, KUBEACC_DEVICE_MEMORY_LIMIT %d",
                               n + 1, ndev);
        have_units = 1;
    }
    const char *sock = getenv("KUBEACC_SHARELIMIT_SOCKET");
    if (sock) {
        if (!*sock || sock[0] != '/' || strlen(sock) >= sizeof sock_path)
            return fail_closed("KUBEACC_SHARELIMIT_SOCKET=%.64s: expected an absolute path of at "
                               "most %zu bytes", sock, sizeof sock_path - 1);
        snprintf(sock_path, sizeof sock_path, "%s", sock);
        const char *wait = getenv("KUBEACC_SHARELIMIT_WAIT_MS");
        if (wait && *wait) svc_wait_ms = atoi(wait);
    } else if (getenv("KUBEACC_SHARELIMIT_ID")) {
        /* The container-wide account of an older kube-acc (a file the container could rewrite):
         * a share must not fall back to one account per process. */
        return fail_closed("KUBEACC_SHARELIMIT_ID without KUBEACC_SHARELIMIT_SOCKET: the share was "
                           "prepared by an older kube-acc agent; prepare it again");
    }
}

/* ---- the container's account: kept by the agent's accounting service ----
 * Each process keeps its part of the container's account in the agent's accounting service
 * (kubeacc/node/shareaccount.py), over a connection of its own to the share's unix socket,
 * which the CDI spec mounts read-only into the container: no process of the container can
 * rewrite or remove the account, and what a process holds is tied to its connection, given
 * back when the connection closes (the process is gone: exit, kill, or exec). A reservation is
 * one round trip, a return one message. If the connection breaks (the agent restarted), the
 * process reconnects, waiting up to svc_wait_ms, and declares again what it holds. */
enum { OP_HELLO = 1, OP_RESERVE, OP_RELEASE, OP_ADOPT, OP_QUERY };
struct svc_msg { uint32_t op, unit; unsigned long long bytes; };
struct svc_reply { unsigned long long status, used; }; /* 64 bits each */
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static int svc_fd = -1;
static unsigned long long held_here[MAX_DEV]; /* this process's part, under svc_lock */
/* The service's token of this process's connection: presented when it reconnects (the agent
 * restarted), so that the new service drops the old connection's record. */
static unsigned long long svc_token;

static int svc_io(int out, void *buf, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t r = out ? send(svc_fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                        : recv(svc_fd, (char *)buf + done, n - done, 0);
        if (r > 0) done += (size_t)r;
        else if (r == 0 || errno != EINTR) return -1;
    }
    return 0;
}
/* Under svc_lock: one message (and its reply when rep is given); -1 and the connection
 * closed if it broke. */
static int svc_call_locked(uint32_t op, int unit, unsigned long long bytes, struct svc_reply *rep) {
    struct svc_msg m = {op, (uint32_t)unit, bytes};
    if (svc_fd >= 0 && svc_io(1, &m, sizeof m) == 0 && (!rep || svc_io(0, rep, sizeof *rep) == 0))
        return 0;
    if (svc_fd >= 0) close(svc_fd);
    svc_fd = -1;
    return -1;
}
/* Under svc_lock: connect (waiting for the service while it restarts), say hello, declare
 * what this process holds. 0 when connected. */
static int svc_connect_locked(void) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, sock_path, strlen(sock_path));
    for (int waited = 0;; waited += 20) {
        svc_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (svc_fd < 0) return -1;
        struct svc_reply rep, tok;
        if (connect(svc_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            svc_call_locked(OP_HELLO, ndev, svc_token, &rep) == 0 && svc_io(0, &tok, sizeof tok) == 0) {
            svc_token = tok.status;
            if (rep.status != 0 || rep.used != (unsigned long long)ndev) {
                close(svc_fd);
                svc_fd = -1;
                fail_closed("%s: the share's account has %llu units, KUBEACC_DEVICE_MEMORY_LIMIT %d",
                            sock_path, rep.used, ndev);
                return -1;
            }
            for (int d = 0; d < ndev; d++)
                if (held_here[d] && svc_call_locked(OP_ADOPT, d, held_here[d], NULL) != 0) break;
            if (svc_fd >= 0) return 0;
        }
        if (svc_fd >= 0) close(svc_fd);
        svc_fd = -1;
        if (waited >= svc_wait_ms) return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
/* A request with a reply, reconnecting once if the connection broke; -1: no service. */
static int svc_ask(uint32_t op, int unit, unsigned long long bytes, struct svc_reply *rep) {
    pthread_mutex_lock(&svc_lock);
    int r = -1;
    for (int i = 0; i < 2 && r != 0; i++)
        if (svc_fd >= 0 || svc_connect_locked() == 0) r = svc_call_locked(op, unit, bytes, rep);
    if (r == 0 && op == OP_RESERVE && rep->status == 0) held_here[unit] += bytes;
    pthread_mutex_unlock(&svc_lock);
    return r;
}
static void svc_release(int unit, unsigned long long bytes) {
    pthread_mutex_lock(&svc_lock);
    held_here[unit] = held_here[unit] > bytes ? held_here[unit] - bytes : 0;
    /* A broken connection: the next request reconnects and declares what is held then. */
    if (svc_fd >= 0) svc_call_locked(OP_RELEASE, unit, bytes, NULL);
    pthread_mutex_unlock(&svc_lock);
}

/* ---- the allocation table: what each handle took, so its free gives it back ---- */
/* K_VMM: a cuMemCreate handle (refs: its references, maps: its mappings); K_MAP: a mapping
 * (key its address, size its length, aux the handle); K_GRAPHMEM: a graph allocation node's
 * memory (aux the graph, maps 1 once freed); K_GRAPH: a graph with allocation nodes (refs: 1
 * while it lives, plus its live executable graphs); K_EXEC: an executable graph (aux its graph).
 * Only K_PTR .. K_VMM and K_GRAPHMEM hold capacity. */
enum { K_PTR = 1, K_ARRAY, K_MIPMAP, K_VMM, K_MAP, K_GRAPHMEM, K_GRAPH, K_EXEC };
struct entry {
    unsigned long long key, size, aux;
    int kind, dev, refs, maps;
};
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static size_t table_cap, table_len;

static size_t slot_of(unsigned long long key, int kind) {
    return (size_t)(((key ^ (unsigned long long)kind) * 0x9E3779B97F4A7C15ULL) >> 20) & (table_cap - 1);
}

static int table_put_locked(struct entry e) {
    if ((table_len + 1) * 2 > table_cap) {
        size_t old_cap = table_cap, cap = old_cap ? old_cap * 2 : 1024;
        struct entry *old = table, *t = calloc(cap, sizeof *t);
        if (!t) return 0;
        table = t, table_cap = cap, table_len = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].kind) table_put_locked(old[i]);
        free(old);
    }
    size_t i = slot_of(e.key, e.kind);
    while (table[i].kind) i = (i + 1) & (table_cap - 1);
    table[i] = e;
    table_len++;
    return 1;
}

/* Under the lock: the handle's entry, or NULL. */
static struct entry *table_find_locked(unsigned long long key, int kind) {
    if (!table_cap) return NULL;
    size_t mask = table_cap - 1, i = slot_of(key, kind);
    for (; table[i].kind; i = (i + 1) & mask)
        if (table[i].key == key && table[i].kind == kind) return &table[i];
    return NULL;
}

/* Under the lock: remove an entry table_find_locked returned. */
static void table_del_locked(struct entry *e) {
    size_t mask = table_cap - 1, i = (size_t)(e - table);
    table_len--;
    for (size_t j = (i + 1) & mask; table[j].kind; j = (j + 1) & mask) {
        size_t k = slot_of(table[j].key, table[j].kind);
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) table[i] = table[j], i = j;
    }
    table[i].kind = 0;
}

/* Remove the handle's entry; 1 and *out if it was there. */
static int table_take(unsigned long long key, int kind, struct entry *out) {
    pthread_mutex_lock(&table_lock);
    struct entry *e = table_find_locked(key, kind);
    if (e) *out = *e, table_del_locked(e);
    pthread_mutex_unlock(&table_lock);
    return e != NULL;
}

/* ---- fork: the child keeps the accounting (its own connection, the container's total) ----
 * A child made by fork() runs the fork handlers; one made by syscall(SYS_fork) or clone runs
 * none, so the library also notices a new process by itself: a page of its own marked
 * MADV_WIPEONFORK reads zero in any child that does not share its memory (vfork shares it: a
 * vfork child is its parent's until it execs). Nothing is given back at exit: a process's part
 * comes back when its connection closes, which is when the process is gone (the child's copy
 * of the parent's connection is closed by the child, the parent's stays), never from a
 * destructor, which may run in a vfork child or before the process's memory is released. */
static struct mark {
    int pid; /* 0 in a child not yet set up */
} fallback_mark, *mark = &fallback_mark;
static int mark_wipes; /* 0: no MADV_WIPEONFORK (before Linux 4.14): compare the pid each call */

static void new_process(void) {
    /* Another thread of the parent may have held a lock at the fork. */
    table_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    svc_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    /* With a container's account the parent's allocations stay the parent's (in its
     * connection), the child connects on its first reservation; without, the child's own
     * account starts with what the parent held (its copy of the memory may hold it). */
    if (sock_path[0]) {
        table_len = 0;
        if (table) memset(table, 0, table_cap * sizeof *table);
        if (svc_fd >= 0) close(svc_fd);
        svc_fd = -1;
        for (int d = 0; d < MAX_DEV; d++) held_here[d] = 0;
        svc_token = 0;
    }
    mark->pid = (int)syscall(SYS_getpid);
}
static void before_fork(void) { pthread_mutex_lock(&table_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&table_lock); }
static void after_fork_child(void) { new_process(); }

static void init(void) {
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
        if (madvise(m, 4096, MADV_WIPEONFORK) == 0) mark = m, mark_wipes = 1;
        else munmap(m, 4096);
    }
    mark->pid = (int)syscall(SYS_getpid);
    read_config();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static inline int enforcing(void) {
    pthread_once(&once, init);
    if (__builtin_expect(mark_wipes ? mark->pid == 0 : mark->pid != (int)syscall(SYS_getpid), 0))
        new_process();
    return ndev > 0 || broken[0];
}

/* ---- devices: CUDA ordinal -> unit index ---- */
static int index_of_ordinal(CUdevice ord) {
    if (ord < 0) return -1;
    if (ord < MAX_ORDINAL) {
        int c = atomic_load_explicit(&ordinal_index[ord], memory_order_relaxed);
        if (c) return c > 0 ? c - 1 : -1;
    }
    int idx = -1;
    char bus[64];
    unsigned v[4];
    cuDeviceGetPCIBusId_fn get = REAL(cuDeviceGetPCIBusId);
    if (have_units && get && get(bus, sizeof bus, ord) == CUDA_SUCCESS &&
        parse_bus_id(bus, strnlen(bus, sizeof bus), v)) {
        for (int i = 0; i < ndev; i++)
            if (unit[i].ok && unit[i].dom == v[0] && unit[i].bus == v[1] && unit[i].dev == v[2] &&
                unit[i].fn == v[3])
                idx = i;
    } else if (ord < ndev) {
        idx = ord;
    }
    if (ord < MAX_ORDINAL) atomic_store_explicit(&ordinal_index[ord], idx >= 0 ? idx + 1 : -1, memory_order_relaxed);
    return idx;
}

/* The current context's unit; -2: no context (the driver will say so); -3: the driver that
 * would tell is not reachable (an allocator of a copy of the driver nothing else is known of). */
static int current_index(void) {
    CUdevice d;
    cuCtxGetDevice_fn get = REAL(cuCtxGetDevice);
    if (!get) return -3;
    if (get(&d) != CUDA_SUCCESS) return -2;
    return index_of_ordinal(d);
}

/* ---- reserving and returning capacity ---- */
static void denied(int idx, unsigned long long size, const char *why) {
    if (atomic_fetch_add(&denials, 1) < 8)
        say("kubeacc-sharelimit: GPU memory allocation of %llu bytes refused: %s", size, why);
    (void)idx;
}

/* Reserve size bytes on unit idx; CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult reserve(int idx, unsigned long long size) {
    char why[200];
    if (broken[0]) return denied(idx, size, broken), CUDA_ERROR_OUT_OF_MEMORY;
    if (idx == -3) {
        denied(idx, size, "the driver's cuCtxGetDevice is not reachable: the device is unknown");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (idx < 0) {
        denied(idx, size, "the device is not one of the share's units (ACCELERATOR_UNITS)");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (sock_path[0]) {
        struct svc_reply rep;
        if (svc_ask(OP_RESERVE, idx, size, &rep) != 0) {
            snprintf(why, sizeof why, "the share's accounting service (%s) is not reachable", sock_path);
            return denied(idx, size, why), CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (rep.status == 0) return CUDA_SUCCESS;
        snprintf(why, sizeof why, "unit %d's share is %llu MiB, %llu bytes of it in use", idx,
                 limit[idx] >> 20, rep.used);
        return denied(idx, size, why), CUDA_ERROR_OUT_OF_MEMORY;
    }
    _Atomic unsigned long long *used = &local_used[idx];
    unsigned long long cur = atomic_load_explicit(used, memory_order_relaxed);
    while (size <= limit[idx] && cur <= limit[idx] - size)
        if (atomic_compare_exchange_weak_explicit(used, &cur, cur + size, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return CUDA_SUCCESS;
    snprintf(why, sizeof why, "unit %d's share is %llu MiB, %llu bytes of it in use", idx,
             limit[idx] >> 20, cur);
    denied(idx, size, why);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static void unreserve(int idx, unsigned long long size) {
    if (idx < 0 || !size) return;
    if (sock_path[0]) svc_release(idx, size);
    else atomic_fetch_sub_explicit(&local_used[idx], size, memory_order_acq_rel);
}

/* After a successful real allocation: remember it (or undo it if the table is out of memory). */
static int remember(unsigned long long key, int kind, int idx, unsigned long long size) {
    pthread_mutex_lock(&table_lock);
    int ok = table_put_locked((struct entry){key, size, 0, kind, idx, 1, 0});
    pthread_mutex_unlock(&table_lock);
    if (!ok) unreserve(idx, size);
    return ok;
}

static void graph_mem_freed(unsigned long long dptr);
static void forget(unsigned long long key, int kind) {
    struct entry e;
    if (table_take(key, kind, &e)) unreserve(e.dev, e.size);
    else if (kind == K_PTR) graph_mem_freed(key); /* a graph allocation freed outside a graph */
}

/* The common path of an allocation: reserve, call the driver, remember the handle. */
#define GUARDED(name, idx_expr, size_expr, args, key_expr, kind, undo)                          \
    do {                                                                                         \
        name##_fn f_ = REAL(name);                                                               \
        if (!f_) return CUDA_ERROR_NOT_INITIALIZED;                                              \
        if (!enforcing()) return f_ args;                                                        \
        int idx_ = (idx_expr);                                                                   \
        if (idx_ == -2) return f_ args;                                                          \
        unsigned long long size_ = (size_expr);                                                  \
        CUresult r_ = reserve(idx_, size_);                                                      \
        if (r_ != CUDA_SUCCESS) return r_;                                                       \
        r_ = f_ args;                                                                            \
        if (r_ != CUDA_SUCCESS) {                                                                \
            unreserve(idx_, size_);                                                              \
            return r_;                                                                           \
        }                                                                                        \
        if (!remember((unsigned long long)(key_expr), kind, idx_, size_)) {                      \
            undo;                                                                                \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                     \
        }                                                                                        \
        return CUDA_SUCCESS;                                                                     \
    } while (0)
#define UNDO(name, arg)                                                                          \
    do {                                                                                         \
        name##_fn u_ = REAL(name);                                                               \
        if (u_) u_(arg);                                                                         \
    } while (0)

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
    if (!dptr) CALL(cuMemAlloc_v2, dptr, n);
    GUARDED(cuMemAlloc_v2, current_index(), n, (dptr, n), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int n) {
    if (!dptr) CALL(cuMemAlloc, dptr, n);
    GUARDED(cuMemAlloc, current_index(), n, (dptr, n), *dptr, K_PTR, UNDO(cuMemFree, *dptr));
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags) {
    if (!dptr) CALL(cuMemAllocManaged, dptr, n, flags);
    GUARDED(cuMemAllocManaged, current_index(), n, (dptr, n, flags), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {
    if (!dptr) CALL(cuMemAllocAsync, dptr, n, s);
    GUARDED(cuMemAllocAsync, current_index(), n, (dptr, n, s), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s) {
    if (!dptr) CALL(cuMemAllocAsync_ptsz, dptr, n, s);
    GUARDED(cuMemAllocAsync_ptsz, current_index(), n, (dptr, n, s), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}
/* A pool's allocation counts against the current device (a pool of another device is rare). */
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s) {
    if (!dptr) CALL(cuMemAllocFromPoolAsync, dptr, n, p, s);
    GUARDED(cuMemAllocFromPoolAsync, current_index(), n, (dptr, n, p, s), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool p,
                                             CUstream s) {
    if (!dptr) CALL(cuMemAllocFromPoolAsync_ptsz, dptr, n, p, s);
    GUARDED(cuMemAllocFromPoolAsync_ptsz, current_index(), n, (dptr, n, p, s), *dptr, K_PTR, UNDO(cuMemFree_v2, *dptr));
}

/* Pitched: reserve the row rounded up to the usual pitch alignment, then settle on the pitch
 * the driver chose (a wider pitch must fit too, or the allocation is undone). */
#define PITCHED(name, ptr_t, size_t_, free_fn)                                                   \
    EXPORT CUresult name(ptr_t *dptr, size_t_ *pitch, size_t_ w, size_t_ h, unsigned int elem) { \
        name##_fn f = REAL(name);                                                                \
        if (!f) return CUDA_ERROR_NOT_INITIALIZED;                                               \
        int idx = enforcing() && dptr && pitch ? current_index() : -2;                           \
        if (idx == -2) return f(dptr, pitch, w, h, elem);                                        \
        unsigned long long rows = h ? h : 1;                                                     \
        unsigned long long want = ((unsigned long long)w + PITCH_ALIGN - 1) / PITCH_ALIGN *      \
                                  PITCH_ALIGN * rows;                                            \
        CUresult r = reserve(idx, want);                                                         \
        if (r != CUDA_SUCCESS) return r;                                                         \
        r = f(dptr, pitch, w, h, elem);                                                          \
        if (r != CUDA_SUCCESS) return unreserve(idx, want), r;                                   \
        unsigned long long got = (unsigned long long)*pitch * rows;                              \
        if (got < want) unreserve(idx, want - got);                                              \
        if ((got > want && reserve(idx, got - want) != CUDA_SUCCESS && (unreserve(idx, want), 1)) || \
            !remember(*dptr, K_PTR, idx, got)) {                                                 \
            UNDO(free_fn, *dptr);                                                                \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                     \
        }                                                                                        \
        return CUDA_SUCCESS;                                                                     \
    }
PITCHED(cuMemAllocPitch_v2, CUdeviceptr, size_t, cuMemFree_v2)
PITCHED(cuMemAllocPitch, CUdeviceptr_v1, unsigned int, cuMemFree)

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (enforcing()) forget(p, K_PTR);
    CALL(cuMemFree_v2, p);
}
EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) {
    if (enforcing()) forget(p, K_PTR);
    CALL(cuMemFree, p);
}
/* Given back when the free is enqueued, not when the stream reaches it. */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    if (enforcing()) forget(p, K_PTR);
    CALL(cuMemFreeAsync, p, s);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    if (enforcing()) forget(p, K_PTR);
    CALL(cuMemFreeAsync_ptsz, p, s);
}

/* Arrays count width x height x depth elements of the format's size; a format whose element
 * size is not listed (packed, block-compressed) counts 16 bytes per element, never less. */
static unsigned long long element_bytes(int format, unsigned int channels) {
    unsigned long long b;
    switch (format) {
    case 0x01: case 0x08: b = 1; break;            /* (UN)SIGNED_INT8 */
    case 0x02: case 0x09: case 0x10: b = 2; break; /* (UN)SIGNED_INT16, HALF */
    case 0x03: case 0x0a: case 0x20: b = 4; break; /* (UN)SIGNED_INT32, FLOAT */
    default: b = 16; break;
    }
    return b * (channels ? channels : 1);
}
static unsigned long long dims(unsigned long long w, unsigned long long h, unsigned long long d) {
    return (w ? w : 1) * (h ? h : 1) * (d ? d : 1);
}
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!a || !d) CALL(cuArrayCreate_v2, a, d);
    GUARDED(cuArrayCreate_v2, current_index(), dims(d->Width, d->Height, 1) * element_bytes(d->Format, d->NumChannels), (a, d), (uintptr_t)*a, K_ARRAY, UNDO(cuArrayDestroy, *a));
}
EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    if (!a || !d) CALL(cuArrayCreate, a, d);
    GUARDED(cuArrayCreate, current_index(), dims(d->Width, d->Height, 1) * element_bytes(d->Format, d->NumChannels), (a, d), (uintptr_t)*a, K_ARRAY, UNDO(cuArrayDestroy, *a));
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!a || !d) CALL(cuArray3DCreate_v2, a, d);
    GUARDED(cuArray3DCreate_v2, current_index(), dims(d->Width, d->Height, d->Depth) * element_bytes(d->Format, d->NumChannels), (a, d), (uintptr_t)*a, K_ARRAY, UNDO(cuArrayDestroy, *a));
}
EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    if (!a || !d) CALL(cuArray3DCreate, a, d);
    GUARDED(cuArray3DCreate, current_index(), dims(d->Width, d->Height, d->Depth) * element_bytes(d->Format, d->NumChannels), (a, d), (uintptr_t)*a, K_ARRAY, UNDO(cuArrayDestroy, *a));
}
EXPORT CUresult cuArrayDestroy(CUarray a) {
    if (enforcing()) forget((uintptr_t)a, K_ARRAY);
    CALL(cuArrayDestroy, a);
}
static unsigned long long mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    unsigned long long w = d->Width, h = d->Height, z = d->Depth, total = 0;
    for (unsigned int l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        total += dims(w, h, z) * element_bytes(d->Format, d->NumChannels);
        w = w > 1 ? w / 2 : w, h = h > 1 ? h / 2 : h;
        if (!(d->Flags & 0x01)) z = z > 1 ? z / 2 : z; /* CUDA_ARRAY3D_LAYERED keeps its layers */
    }
    return total;
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int levels) {
    if (!a || !d) CALL(cuMipmappedArrayCreate, a, d, levels);
    GUARDED(cuMipmappedArrayCreate, current_index(), mipmap_bytes(d, levels), (a, d, levels), (uintptr_t)*a, K_MIPMAP, UNDO(cuMipmappedArrayDestroy, *a));
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
    if (enforcing()) forget((uintptr_t)a, K_MIPMAP);
    CALL(cuMipmappedArrayDestroy, a);
}

/* Virtual memory management: physical memory is created on the device the properties name. */
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
                            const CUmemAllocationProp *prop, unsigned long long flags) {
    if (!h || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        CALL(cuMemCreate, h, n, prop, flags);
    GUARDED(cuMemCreate, index_of_ordinal(prop->location.id), n, (h, n, prop, flags), *h, K_VMM, UNDO(cuMemRelease, *h));
}
/* The driver frees a handle's memory once every reference to it is released and its last
 * mapping unmapped (cuMemRelease, cuMemUnmap); so does the account. */
static void vmm_settle_locked(struct entry *e) {
    if (e->refs > 0 || e->maps > 0) return;
    unreserve(e->dev, e->size);
    table_del_locked(e);
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (enforcing()) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = table_find_locked(h, K_VMM);
        if (e && e->refs > 0) e->refs--, vmm_settle_locked(e);
        pthread_mutex_unlock(&table_lock);
    }
    CALL(cuMemRelease, h);
}
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    cuMemRetainAllocationHandle_fn f = REAL(cuMemRetainAllocationHandle);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(h, addr);
    if (r == CUDA_SUCCESS && h && enforcing()) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = table_find_locked(*h, K_VMM);
        if (e) e->refs++;
        pthread_mutex_unlock(&table_lock);
    }
    return r;
}
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
    cuMemMap_fn f = REAL(cuMemMap);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(ptr, size, offset, h, flags);
    if (r != CUDA_SUCCESS || !enforcing()) return r;
    pthread_mutex_lock(&table_lock);
    struct entry *e = table_find_locked(h, K_VMM);
    int ok = 1;
    if (e) {
        e->maps++;
        ok = table_put_locked((struct entry){ptr, size, h, K_MAP, -1, 0, 0});
        if (!ok && (e = table_find_locked(h, K_VMM))) e->maps--; /* (the table may have moved) */
    }
    pthread_mutex_unlock(&table_lock);
    if (ok) return CUDA_SUCCESS;
    cuMemUnmap_fn u = REAL(cuMemUnmap);
    if (u) u(ptr, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
/* The range is whole mappings, one after the other (the driver refuses anything else). */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (enforcing() && size) {
        pthread_mutex_lock(&table_lock);
        unsigned long long at = ptr, end = ptr + size;
        struct entry *m;
        while (at < end && (m = table_find_locked(at, K_MAP)) && m->size <= end - at) at += m->size;
        if (at == end) /* else the driver refuses it: nothing changes */
            for (at = ptr; at < end && (m = table_find_locked(at, K_MAP));) {
                unsigned long long h = m->aux;
                at += m->size;
                table_del_locked(m);
                struct entry *e = table_find_locked(h, K_VMM);
                if (e && e->maps > 0) e->maps--, vmm_settle_locked(e);
            }
        pthread_mutex_unlock(&table_lock);
    }
    CALL(cuMemUnmap, ptr, size);
}

/* Graph memory nodes: an allocation node's memory counts against the device its pool names from
 * the node's creation until it is freed (a free node in any graph, cuMemFree, cuMemFreeAsync)
 * and its graph and every executable graph instantiated from it are destroyed (while they
 * live, a launch can allocate it again). */
static void graph_settle_locked(unsigned long long g) {
    struct entry *gr = table_find_locked(g, K_GRAPH);
    if (gr && gr->refs > 0) return;
    for (int again = 1; again;) /* (a deletion moves entries: look again until none is left) */
        for (size_t i = again = 0; i < table_cap; i++)
            if (table[i].kind == K_GRAPHMEM && table[i].aux == g && table[i].maps) {
                unreserve(table[i].dev, table[i].size);
                table_del_locked(&table[i]);
                again = 1;
            }
}
static void graph_mem_freed(unsigned long long dptr) {
    pthread_mutex_lock(&table_lock);
    struct entry *e = table_find_locked(dptr, K_GRAPHMEM);
    if (e && !e->maps) e->maps = 1, graph_settle_locked(e->aux);
    pthread_mutex_unlock(&table_lock);
}
/* A graph reference more (its creation or an instantiation); 0 if the table is out of memory. */
static int graph_ref_locked(unsigned long long g, int create) {
    struct entry *gr = table_find_locked(g, K_GRAPH);
    if (gr) return gr->refs++, 1;
    return !create || table_put_locked((struct entry){g, 0, 0, K_GRAPH, -1, 1, 0});
}
static void graph_unref(unsigned long long g) {
    pthread_mutex_lock(&table_lock);
    struct entry *gr = table_find_locked(g, K_GRAPH);
    if (gr && --gr->refs <= 0) table_del_locked(gr), graph_settle_locked(g);
    pthread_mutex_unlock(&table_lock);
}
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                       size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    cuGraphAddMemAllocNode_fn f = REAL(cuGraphAddMemAllocNode);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    if (!enforcing() || !p || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return f(node, g, deps, ndeps, p);
    int idx = index_of_ordinal(p->poolProps.location.id);
    unsigned long long size = p->bytesize;
    CUresult r = reserve(idx, size);
    if (r != CUDA_SUCCESS) return r;
    r = f(node, g, deps, ndeps, p);
    if (r != CUDA_SUCCESS) return unreserve(idx, size), r;
    pthread_mutex_lock(&table_lock);
    unsigned long long gk = (uintptr_t)g;
    /* The graph's own reference, once however many nodes it has. Out of memory for the table:
     * the node stays and its memory counts as the process's for good (never less than held). */
    if (table_find_locked(gk, K_GRAPH) || graph_ref_locked(gk, 1))
        table_put_locked((struct entry){p->dptr, size, gk, K_GRAPHMEM, idx, 0, 0});
    pthread_mutex_unlock(&table_lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                      size_t ndeps, CUdeviceptr dptr) {
    cuGraphAddMemFreeNode_fn f = REAL(cuGraphAddMemFreeNode);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(node, g, deps, ndeps, dptr);
    if (r == CUDA_SUCCESS && enforcing()) graph_mem_freed(dptr);
    return r;
}
EXPORT CUresult cuGraphDestroy(CUgraph g) {
    if (enforcing()) {
        pthread_mutex_lock(&table_lock);
        int known = table_find_locked((uintptr_t)g, K_GRAPH) != NULL;
        pthread_mutex_unlock(&table_lock);
        if (known) graph_unref((uintptr_t)g);
    }
    CALL(cuGraphDestroy, g);
}
/* An executable graph of a graph with allocation nodes holds the graph's allocations. */
static CUresult instantiated(CUresult r, CUgraphExec *e, CUgraph g) {
    if (r != CUDA_SUCCESS || !e || !enforcing()) return r;
    pthread_mutex_lock(&table_lock);
    if (table_find_locked((uintptr_t)g, K_GRAPH) &&
        table_put_locked((struct entry){(uintptr_t)*e, 0, (uintptr_t)g, K_EXEC, -1, 0, 0}))
        graph_ref_locked((uintptr_t)g, 0);
    pthread_mutex_unlock(&table_lock);
    return r;
}
EXPORT CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n) {
    cuGraphInstantiate_fn f = REAL(cuGraphInstantiate);
    return f ? instantiated(f(e, g, err, log, n), e, g) : CUDA_ERROR_NOT_INITIALIZED;
}
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
                                      size_t n) {
    cuGraphInstantiate_v2_fn f = REAL(cuGraphInstantiate_v2);
    return f ? instantiated(f(e, g, err, log, n), e, g) : CUDA_ERROR_NOT_INITIALIZED;
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
    cuGraphInstantiateWithFlags_fn f = REAL(cuGraphInstantiateWithFlags);
    return f ? instantiated(f(e, g, flags), e, g) : CUDA_ERROR_NOT_INITIALIZED;
}
EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    cuGraphInstantiateWithParams_fn f = REAL(cuGraphInstantiateWithParams);
    return f ? instantiated(f(e, g, p), e, g) : CUDA_ERROR_NOT_INITIALIZED;
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    cuGraphInstantiateWithParams_ptsz_fn f = REAL(cuGraphInstantiateWithParams_ptsz);
    return f ? instantiated(f(e, g, p), e, g) : CUDA_ERROR_NOT_INITIALIZED;
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
    if (enforcing()) {
        struct entry x;
        if (table_take((uintptr_t)e, K_EXEC, &x)) graph_unref(x.aux);
    }
    CALL(cuGraphExecDestroy, e);
}

/* ---- memory queries: the share is the device's memory ---- */
static void as_share(int idx, unsigned long long *total, unsigned long long *free_) {
    if (idx < 0 || idx >= ndev) return;
    unsigned long long used = atomic_load(&local_used[idx]);
    struct svc_reply rep;
    if (sock_path[0]) used = svc_ask(OP_QUERY, idx, 0, &rep) == 0 ? rep.used : limit[idx];
    if (limit[idx] < *total) *total = limit[idx];
    unsigned long long left = *total > used ? *total - used : 0;
    if (left < *free_) *free_ = left;
}
static unsigned int clamp32(unsigned long long v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    cuMemGetInfo_v2_fn f = REAL(cuMemGetInfo_v2);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(free_, total);
    if (r == CUDA_SUCCESS && enforcing() && free_ && total) {
        unsigned long long t = *total, fr = *free_;
        as_share(current_index(), &t, &fr);
        *total = t, *free_ = fr;
    }
    return r;
}
EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS && free_ && total) *free_ = clamp32(f), *total = clamp32(t);
    return r;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    cuDeviceTotalMem_v2_fn f = REAL(cuDeviceTotalMem_v2);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(bytes, dev);
    if (r == CUDA_SUCCESS && enforcing() && bytes) {
        unsigned long long t = *bytes, fr = t;
        as_share(index_of_ordinal(dev), &t, &fr);
        *bytes = t;
    }
    return r;
}
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t t = 0;
    CUresult r = cuDeviceTotalMem_v2(&t, dev);
    if (r == CUDA_SUCCESS && bytes) *bytes = clamp32(t);
    return r;
}

static int index_of_nvml(nvmlDevice_t dev) {
    nvmlPciInfo_t pci;
    nvmlDeviceGetPciInfo_v3_fn get = REAL(nvmlDeviceGetPciInfo_v3);
    if (have_units && get && get(dev, &pci) == NVML_SUCCESS) {
        for (int i = 0; i < ndev; i++)
            if (unit[i].ok && unit[i].dom == pci.domain && unit[i].bus == pci.bus &&
                unit[i].dev == pci.device)
                return i;
        return -1;
    }
    return ndev == 1 ? 0 : -1;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    nvmlDeviceGetMemoryInfo_fn f = REAL(nvmlDeviceGetMemoryInfo);
    if (!f) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(dev, m);
    if (r == NVML_SUCCESS && enforcing() && m) {
        as_share(index_of_nvml(dev), &m->total, &m->free);
        m->used = m->total - m->free;
    }
    return r;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    nvmlDeviceGetMemoryInfo_v2_fn f = REAL(nvmlDeviceGetMemoryInfo_v2);
    if (!f) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(dev, m);
    if (r == NVML_SUCCESS && enforcing() && m) {
        as_share(index_of_nvml(dev), &m->total, &m->free);
        m->used = m->total > m->free + m->reserved ? m->total - m->free - m->reserved : 0;
    }
    return r;
}

/* ---- cuGetProcAddress: hand out this library's entry points for the covered symbols ---- */
static void *const hook_fn[] = {
#define X(name, args) (void *)name,
    KUBEACC_CU_FUNCS(X) KUBEACC_NVML_FUNCS(X)
#undef X
};
/* The CUDA driver's entries of hook_fn (cuGetProcAddress hands out only those). */
#define N_CU_HOOKS IDX_nvmlDeviceGetMemoryInfo

/* The hook for what the driver returned: matched by address when the real symbol is known,
 * else by name as the driver versions it (_v2 from CUDA 3.2, _ptsz for per-thread streams). */
static void *hook_for(const char *sym, void *got, int version, cuuint64_t flags) {
    int n = N_CU_HOOKS;
    for (int i = 0; i < n; i++)
        if (hook_fn[i] == got) return got; /* already ours */
    for (int i = 0; i < n; i++)
        if (resolve(i) == got) return hook_fn[i];
    char want[96];
    static const char *const v2[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                                     "cuDeviceTotalMem", "cuArrayCreate", "cuArray3DCreate"};
    static const char *const ptsz[] = {"cuMemAllocAsync", "cuMemAllocFromPoolAsync",
                                       "cuMemFreeAsync", "cuGraphInstantiateWithParams"};
    snprintf(want, sizeof want, "%s", sym);
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++)
        if (!strcmp(sym, v2[i]) && version >= 3020) snprintf(want, sizeof want, "%s_v2", sym);
    for (size_t i = 0; i < sizeof ptsz / sizeof ptsz[0]; i++)
        if (!strcmp(sym, ptsz[i]) && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
            snprintf(want, sizeof want, "%s_ptsz", sym);
    if (!strcmp(sym, "cuGetProcAddress") && version >= 12000)
        snprintf(want, sizeof want, "cuGetProcAddress_v2");
    if (!strcmp(sym, "cuGraphInstantiate") && version >= 11000)
        snprintf(want, sizeof want, "%s",
                 version >= 12000 ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate_v2");
    for (int i = 0; i < n; i++)
        if (!strcmp(real_name[i], want)) {
            void *expected = MISSING; /* not found by the loader: the driver's answer is it */
            atomic_compare_exchange_strong(&real_fn[i], &expected, got);
            return resolve(i) ? hook_fn[i] : got;
        }
    return got;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    cuGetProcAddress_v2_fn f = REAL(cuGetProcAddress_v2);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(sym, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn) *pfn = hook_for(sym, *pfn, version, flags);
    return r;
}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags) {
    cuGetProcAddress_fn f = REAL(cuGetProcAddress);
    if (!f) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = f(sym, pfn, version, flags);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn) *pfn = hook_for(sym, *pfn, version, flags);
    return r;
}

/* ---- dlsym: a program (the CUDA runtime) that opens libcuda.so.1 itself and looks its symbols
 * up on that handle gets this library's entry points for the covered ones, too; so does one
 * that uses dlvsym, or a handle of another copy of the driver (opened by another path): the
 * entry points call the driver this library found first. The dynamic-linking functions
 * themselves (dlsym, dlvsym, dlmopen), looked up on the C library's handle, are this
 * library's, so that the C library's own are not reached that way. ---- */
EXPORT void *dlvsym(void *handle, const char *name, const char *version);
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode);
static void *hooked_symbol(const char *name, void *got) {
    if (!got || !name) return got;
    if (name[0] == 'd' && name[1] == 'l') {
        if (!strcmp(name, "dlsym")) return (void *)dlsym;
        if (!strcmp(name, "dlvsym")) return (void *)dlvsym;
        if (!strcmp(name, "dlmopen")) return (void *)dlmopen;
        return got;
    }
    if (!((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))) return got;
    for (int i = 0; i < (int)(sizeof hook_fn / sizeof hook_fn[0]); i++)
        if (!strcmp(real_name[i], name)) {
            if (got == hook_fn[i]) return got;
            if (!resolve(i)) { /* no driver found yet: this one is it */
                void *expected = MISSING;
                atomic_compare_exchange_strong(&real_fn[i], &expected, got);
            }
            return hook_fn[i];
        }
    return got;
}
EXPORT void *dlsym(void *handle, const char *name) {
    dlsym_fn next = libc_dlsym();
    return next ? hooked_symbol(name, next(handle, name)) : NULL;
}
EXPORT void *dlvsym(void *handle, const char *name, const char *version) {
    return hooked_symbol(name, kubeacc_libc_dlvsym(handle, name, version));
}
/* A new link-map namespace is one the preloaded library is not in: a driver (or a library that
 * opens one) loaded there would not be held. Refused while a share is enforced. */
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode) {
    if (lmid != LM_ID_BASE && enforcing()) {
        if (atomic_fetch_add(&denials, 1) < 8)
            say("kubeacc-sharelimit: dlmopen of %.200s into another link-map namespace refused: "
                "the GPU memory share is not enforced there", file ? file : "(null)");
        /* dlerror() says so too: a path that cannot be opened, named for the reason. */
        dlopen("/dev/null/kubeacc-sharelimit: dlmopen into another namespace is refused",
               RTLD_LAZY);
        return NULL;
    }
    typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
    static dlmopen_fn real;
    dlmopen_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!f) {
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.3.4", "GLIBC_2.17"};
        for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
            f = (dlmopen_fn)kubeacc_libc_dlvsym(RTLD_NEXT, "dlmopen", versions[i]);
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    return f ? f(lmid, file, mode) : NULL;
}
