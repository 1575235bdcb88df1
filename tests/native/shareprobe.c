/* Runs CUDA driver API calls named on its command line, one output line per call, against
 * whatever libcuda.so.1 / libnvidia-ml.so.1 it is linked with (the tests: the stand-in driver,
 * with and without the share-limit library preloaded).
 *
 *   ctx DEV            create a context on DEV, current for this thread
 *   alloc MIB          cuMemAlloc_v2 (also: alloc32, managed, async, pool, gpa = through
 *                      cuGetProcAddress_v2("cuMemAlloc", 12000))
 *   pitch W H          cuMemAllocPitch_v2 (bytes, rows, element size 4)
 *   array W H          cuArrayCreate_v2 of FLOAT x1    array3d W H D   mipmap W H LEVELS
 *   vmm DEV MIB        cuMemCreate on DEV
 *   map I              reserve an address range and cuMemMap the I-th handle (a cuMemCreate
 *                      one) there; the mapping is a handle of its own (its free: cuMemUnmap)
 *   retain I           cuMemRetainAllocationHandle at the I-th handle (a mapping): a handle
 *   graph              cuGraphCreate: the graph the next graph commands use
 *   galloc DEV MIB     cuGraphAddMemAllocNode on DEV (its free: cuMemFree_v2)
 *   gfree I            cuGraphAddMemFreeNode of the I-th handle
 *   ginst              cuGraphInstantiateWithFlags (a handle: its free is cuGraphExecDestroy)
 *   gdestroy           cuGraphDestroy
 *   free I             free the I-th handle (0-based, in order of success) its own way
 *   held DEV           the memory the driver holds for this process on DEV, in MiB (the stand-in
 *                      driver's count, beside the library's)
 *   info / total DEV / nvml DEV   memory queries, in MiB
 *   race THREADS MIB   THREADS threads allocate MIB chunks until refused; prints the sum
 *   fork               the rest runs in a child; the parent prints the child's exit status
 *                      (rawfork: the same with syscall(SYS_fork), which runs no fork handlers)
 *   forkalloc MIB      a child (fork; rawforkalloc: syscall(SYS_fork)) allocates MIB, keeps it
 *                      and exits with the CUresult; the parent waits and prints it, goes on
 *   forkexit / vforkexit / rawforkexit   a child (fork, vfork, syscall(SYS_fork)) that calls
 *                      exit(0) at once; the parent waits for it and goes on
 *   blockexit KIB      KIB KiB into a fully buffered stream on stdout, "exiting" on stderr, then
 *                      exit: the exit flushes it (blocks while nobody reads stdout)
 *   dlvsym MIB         cuMemAlloc_v2 found by the C library's dlsym, itself found with dlvsym
 *   dlmopen MIB        a second libcuda.so.1 in a new link-map namespace (dlmopen): cuInit,
 *                      cuCtxCreate_v2 on device 0 and cuMemAlloc_v2, all found with dlsym on it
 *                      ("dlmopen -1": dlmopen refused)
 *   dlcopy PATH MIB    the same with the copy of the driver at PATH, opened with dlopen
 *   pause              print "pause" and wait for a line on stdin
 *   bench N            N times cuMemAlloc_v2 of 1 MiB and its cuMemFree_v2; ns per pair
 * Each line: the call's name, its CUresult, and values. */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct CUctx_st *CUcontext;
CUresult cuInit(unsigned int flags);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
unsigned long long kubeacc_stub_used(int dev);

#define MIB (1ULL << 20)
enum { H_PTR, H_PTR32, H_ARRAY, H_MIPMAP, H_VMM, H_MAP, H_EXEC };
static unsigned long long map_size[4096];
static CUgraph graph;
static struct { unsigned long long h; int kind; } handles[4096];
static int nhandles;
static CUcontext ctx;

static void keep(unsigned long long h, int kind) {
    if (nhandles < 4096) handles[nhandles].h = h, handles[nhandles++].kind = kind;
}

struct racer { int mib; unsigned long long got; };
static void *race(void *arg) {
    struct racer *r = arg;
    CUdeviceptr p;
    cuCtxSetCurrent(ctx);
    while (cuMemAlloc_v2(&p, r->mib * MIB) == CUDA_SUCCESS) r->got += r->mib * MIB;
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (cuInit(0) != CUDA_SUCCESS) return puts("cuInit failed"), 2;
    for (int i = 1; i < argc; i++) {
        const char *c = argv[i];
        long a = i + 1 < argc ? atol(argv[i + 1]) : 0, b = i + 2 < argc ? atol(argv[i + 2]) : 0;
        long d = i + 3 < argc ? atol(argv[i + 3]) : 0;
        CUresult r;
        CUdeviceptr p = 0;
        if (!strcmp(c, "ctx")) {
            printf("ctx %d\n", cuCtxCreate_v2(&ctx, 0, (CUdevice)a)), i++;
        } else if (!strcmp(c, "alloc") || !strcmp(c, "managed") || !strcmp(c, "async") ||
                   !strcmp(c, "pool") || !strcmp(c, "gpa")) {
            unsigned long long n = (unsigned long long)a * MIB;
            if (c[0] == 'a' && c[1] == 'l') r = cuMemAlloc_v2(&p, n);
            else if (c[0] == 'm') r = cuMemAllocManaged(&p, n, 1);
            else if (c[0] == 'a') r = cuMemAllocAsync(&p, n, NULL);
            else if (c[0] == 'p') r = cuMemAllocFromPoolAsync(&p, n, NULL, NULL);
            else {
                void *fn = NULL;
                r = cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, NULL);
                if (r == CUDA_SUCCESS) r = ((CUresult(*)(CUdeviceptr *, size_t))fn)(&p, n);
            }
            if (r == CUDA_SUCCESS) keep(p, H_PTR);
            printf("%s %d\n", c, r), i++;
        } else if (!strcmp(c, "alloc32")) {
            CUdeviceptr_v1 q;
            r = cuMemAlloc(&q, (unsigned int)(a * MIB));
            if (r == CUDA_SUCCESS) keep(q, H_PTR32);
            printf("%s %d\n", c, r), i++;
        } else if (!strcmp(c, "pitch")) {
            size_t pitch = 0;
            r = cuMemAllocPitch_v2(&p, &pitch, (size_t)a, (size_t)b, 4);
            if (r == CUDA_SUCCESS) keep(p, H_PTR);
            printf("pitch %d %zu\n", r, pitch), i += 2;
        } else if (!strcmp(c, "array") || !strcmp(c, "array3d")) {
            CUarray arr;
            if (c[5]) {
                CUDA_ARRAY3D_DESCRIPTOR desc = {(size_t)a, (size_t)b, (size_t)d, 0x20, 1, 0};
                r = cuArray3DCreate_v2(&arr, &desc), i += 3;
            } else {
                CUDA_ARRAY_DESCRIPTOR desc = {(size_t)a, (size_t)b, 0x20, 1};
                r = cuArrayCreate_v2(&arr, &desc), i += 2;
            }
            if (r == CUDA_SUCCESS) keep((unsigned long long)(uintptr_t)arr, H_ARRAY);
            printf("%s %d\n", c, r);
        } else if (!strcmp(c, "mipmap")) {
            CUmipmappedArray m;
            CUDA_ARRAY3D_DESCRIPTOR desc = {(size_t)a, (size_t)b, 0, 0x20, 1, 0};
            r = cuMipmappedArrayCreate(&m, &desc, (unsigned)d);
            if (r == CUDA_SUCCESS) keep((unsigned long long)(uintptr_t)m, H_MIPMAP);
            printf("mipmap %d\n", r), i += 3;
        } else if (!strcmp(c, "vmm")) {
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = 1, prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id = (int)a;
            CUmemGenericAllocationHandle h;
            r = cuMemCreate(&h, (size_t)b * MIB, &prop, 0);
            if (r == CUDA_SUCCESS) map_size[nhandles] = (size_t)b * MIB, keep(h, H_VMM);
            printf("vmm %d\n", r), i += 2;
        } else if (!strcmp(c, "map")) {
            unsigned long long size = map_size[a];
            CUdeviceptr va = 0;
            r = cuMemAddressReserve(&va, size, 0, 0, 0);
            if (r == CUDA_SUCCESS) r = cuMemMap(va, size, 0, handles[a].h, 0);
            if (r == CUDA_SUCCESS) map_size[nhandles] = size, keep(va, H_MAP);
            printf("map %d\n", r), i++;
        } else if (!strcmp(c, "retain")) {
            CUmemGenericAllocationHandle h;
            r = cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)handles[a].h);
            if (r == CUDA_SUCCESS) keep(h, H_VMM);
            printf("retain %d\n", r), i++;
        } else if (!strcmp(c, "graph")) {
            printf("graph %d\n", cuGraphCreate(&graph, 0));
        } else if (!strcmp(c, "galloc")) {
            CUDA_MEM_ALLOC_NODE_PARAMS prm;
            CUgraphNode node;
            memset(&prm, 0, sizeof prm);
            prm.poolProps.allocType = 1, prm.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prm.poolProps.location.id = (int)a, prm.bytesize = (size_t)b * MIB;
            r = cuGraphAddMemAllocNode(&node, graph, NULL, 0, &prm);
            if (r == CUDA_SUCCESS) keep(prm.dptr, H_PTR);
            printf("galloc %d\n", r), i += 2;
        } else if (!strcmp(c, "gfree")) {
            CUgraphNode node;
            printf("gfree %d\n", cuGraphAddMemFreeNode(&node, graph, NULL, 0, handles[a].h)), i++;
        } else if (!strcmp(c, "ginst")) {
            CUgraphExec e;
            r = cuGraphInstantiateWithFlags(&e, graph, 0);
            if (r == CUDA_SUCCESS) keep((unsigned long long)(uintptr_t)e, H_EXEC);
            printf("ginst %d\n", r);
        } else if (!strcmp(c, "gdestroy")) {
            printf("gdestroy %d\n", cuGraphDestroy(graph));
        } else if (!strcmp(c, "held")) {
            printf("held %llu\n", kubeacc_stub_used((int)a) / MIB), i++;
        } else if (!strcmp(c, "free")) {
            unsigned long long h = handles[a].h;
            int k = handles[a].kind;
            r = k == H_PTR ? cuMemFree_v2(h)
                : k == H_PTR32 ? cuMemFree((CUdeviceptr_v1)h)
                : k == H_ARRAY ? cuArrayDestroy((CUarray)(uintptr_t)h)
                : k == H_MIPMAP ? cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h)
                : k == H_MAP ? cuMemUnmap(h, map_size[a])
                : k == H_EXEC ? cuGraphExecDestroy((CUgraphExec)(uintptr_t)h)
                : cuMemRelease(h);
            printf("free %d\n", r), i++;
        } else if (!strcmp(c, "info")) {
            size_t f = 0, t = 0;
            r = cuMemGetInfo_v2(&f, &t);
            printf("info %d %llu %llu\n", r, f / MIB, t / MIB);
        } else if (!strcmp(c, "total")) {
            size_t t = 0;
            r = cuDeviceTotalMem_v2(&t, (CUdevice)a);
            printf("total %d %llu\n", r, t / MIB), i++;
        } else if (!strcmp(c, "nvml")) {
            nvmlDevice_t dev;
            nvmlMemory_t m;
            nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
            int r0 = nvmlInit_v2(), r1 = nvmlDeviceGetHandleByIndex_v2((unsigned)a, &dev);
            int r2 = nvmlDeviceGetMemoryInfo(dev, &m), r3 = nvmlDeviceGetMemoryInfo_v2(dev, &m2);
            printf("nvml %d %llu %llu %llu %llu\n", r0 | r1 | r2 | r3, m.total / MIB, m.free / MIB,
                   m2.total / MIB, m2.free / MIB), i++;
        } else if (!strcmp(c, "race")) {
            pthread_t t[64];
            struct racer rc[64];
            unsigned long long sum = 0;
            for (long k = 0; k < a && k < 64; k++) {
                rc[k] = (struct racer){(int)b, 0};
                pthread_create(&t[k], NULL, race, &rc[k]);
            }
            for (long k = 0; k < a && k < 64; k++) pthread_join(t[k], NULL), sum += rc[k].got;
            printf("race 0 %llu\n", sum / MIB), i += 2;
        } else if (!strcmp(c, "fork") || !strcmp(c, "rawfork")) {
            pid_t pid = c[0] == 'f' ? fork() : (pid_t)syscall(SYS_fork);
            if (pid > 0) {
                int st = 0;
                waitpid(pid, &st, 0);
                printf("%s %d\n", c, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
                return 0;
            }
        } else if (!strcmp(c, "forkalloc") || !strcmp(c, "rawforkalloc")) {
            fflush(stdout);
            pid_t pid = c[0] == 'f' ? fork() : (pid_t)syscall(SYS_fork);
            if (pid == 0) exit(cuMemAlloc_v2(&p, (size_t)a * MIB)); /* kept until the child ends */
            int st = -1;
            if (pid > 0) waitpid(pid, &st, 0);
            printf("%s %d\n", c, pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1), i++;
        } else if (!strcmp(c, "forkexit") || !strcmp(c, "vforkexit") || !strcmp(c, "rawforkexit")) {
            fflush(stdout);
            pid_t pid = c[0] == 'f' ? fork() : c[0] == 'v' ? vfork() : (pid_t)syscall(SYS_fork);
            if (pid == 0) exit(0); /* a vfork child may only exec or _exit: this is the misuse */
            int st = -1;
            if (pid > 0) waitpid(pid, &st, 0);
            printf("%s %d\n", c, pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        } else if (!strcmp(c, "blockexit")) {
            static char chunk[1024], buffer[4 << 20]; /* glibc sizes a buffer it allocates itself by st_blksize */
            FILE *f = fdopen(dup(1), "w");
            if (!f || a > 4096 || setvbuf(f, buffer, _IOFBF, sizeof buffer)) return 4;
            memset(chunk, 'x', sizeof chunk);
            for (long k = 0; k < a; k++) fwrite(chunk, 1, sizeof chunk, f);
            fputs("exiting\n", stderr);
            exit(0);
        } else if (!strcmp(c, "dlvsym")) {
            void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
            void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            void *(*sym)(void *, const char *) =
                libc ? (void *(*)(void *, const char *))dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
            CUresult (*fn)(CUdeviceptr *, size_t) =
                sym && cuda ? (CUresult(*)(CUdeviceptr *, size_t))sym(cuda, "cuMemAlloc_v2") : NULL;
            r = fn ? fn(&p, (size_t)a * MIB) : -1;
            printf("dlvsym %d\n", r), i++;
        } else if (!strcmp(c, "dlmopen") || !strcmp(c, "dlcopy")) {
            const char *path = c[2] == 'm' ? "libcuda.so.1" : argv[i + 1];
            long mib = c[2] == 'm' ? a : b;
            void *h = c[2] == 'm' ? dlmopen(LM_ID_NEWLM, path, RTLD_NOW) : dlopen(path, RTLD_NOW | RTLD_LOCAL);
            r = -1;
            if (h) {
                CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
                CUresult (*mk)(CUcontext *, unsigned, CUdevice) =
                    (CUresult(*)(CUcontext *, unsigned, CUdevice))dlsym(h, "cuCtxCreate_v2");
                CUresult (*fn)(CUdeviceptr *, size_t) =
                    (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
                CUcontext other;
                r = init && mk && fn ? init(0) : -2;
                if (r == CUDA_SUCCESS) r = mk(&other, 0, 0);
                if (r == CUDA_SUCCESS) r = fn(&p, (size_t)mib * MIB);
                if (r == CUDA_SUCCESS) cuCtxSetCurrent(ctx); /* the other copy's context is its own */
            }
            printf("%s %d\n", c, r), i += c[2] == 'm' ? 1 : 2;
        } else if (!strcmp(c, "bench")) {
            struct timespec t0, t1;
            r = CUDA_SUCCESS;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (long k = 0; k < a && r == CUDA_SUCCESS; k++) {
                r = cuMemAlloc_v2(&p, MIB);
                if (r == CUDA_SUCCESS) r = cuMemFree_v2(p);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
            printf("bench %d %.1f\n", r, a > 0 ? ns / (double)a : 0.0), i++;
        } else if (!strcmp(c, "pause")) {
            char line[8];
            puts("pause");
            if (!fgets(line, sizeof line, stdin)) return 3;
        } else {
            fprintf(stderr, "shareprobe: unknown command %s\n", c);
            return 2;
        }
    }
    return 0;
}
