/* kubeacc-cuda-smoke: the conformance kit's CUDA smoke program (kubeacc selftest, docs/selftest.md).
 *
 * Run in a container that got the driver's user space from a CDI spec, it does what every CUDA
 * program does first, by the driver API's exported names: dlopen("libcuda.so.1") found through
 * the container's ld cache (no LD_LIBRARY_PATH), cuInit, cuDeviceGetCount, a context on device 0,
 * cuMemGetInfo (the total a memory share's library reports), cuMemAlloc of 1 MiB (or of the MiB
 * given as the only argument, to show a share's limit hold) and cuMemFree. One line per step on
 * stdout; the last is "smoke ok" and the exit status 0 when every step passed, else the step that
 * failed with its CUresult and status 1 (2: the library could not be loaded at all; 3: a bad
 * argument).
 *
 * A second argument adds one of issue 44's ways around a memory share, after the allocation is
 * freed (a share's library refuses the second allocation; without one it succeeds):
 *   vmm   cuMemCreate of MiB (rounded up to 2 MiB), mapped, the handle released (the mapping
 *         keeps the memory), then cuMemAlloc of MiB beside it ("cuMemAlloc beside the mapping")
 *   fork  cuMemAlloc of MiB, a child by syscall(SYS_fork) that exits at once, then cuMemAlloc of
 *         MiB again ("cuMemAlloc after the child exited")
 * Each prints its result and "smoke <case> done". */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct CUctx_st *CUcontext;

static void *sym(void *lib, const char *name) {
    void *fn = dlsym(lib, name);
    if (!fn) printf("missing %s\n", name);
    return fn;
}

static int step(const char *what, CUresult r) {
    printf("%s %d\n", what, (int)r);
    return r == CUDA_SUCCESS;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

/* One of the ways around a share (see above); 0 when its own steps succeeded. */
static int way_around(void *cuda, const char *path, size_t size, alloc_fn alloc) {
    CUdeviceptr p, q;
    if (!strcmp(path, "fork")) {
        if (!step("cuMemAlloc", alloc(&p, size))) return 1;
        pid_t pid = (pid_t)syscall(SYS_fork);
        if (pid == 0) exit(0);
        if (pid < 0 || waitpid(pid, NULL, 0) != pid) return puts("fork failed"), 1;
        step("cuMemAlloc after the child exited", alloc(&q, size));
        return puts("smoke fork done"), 0;
    }
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long) =
        (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long))sym(cuda, "cuMemCreate");
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
        (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))sym(
            cuda, "cuMemAddressReserve");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
        (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                     unsigned long long))sym(cuda, "cuMemMap");
    CUresult (*drop)(CUmemGenericAllocationHandle) =
        (CUresult(*)(CUmemGenericAllocationHandle))sym(cuda, "cuMemRelease");
    if (!create || !reserve || !map || !drop) return 2;
    size_t granule = 2 << 20;
    size = (size + granule - 1) / granule * granule;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    if (!step("cuMemCreate", create(&h, size, &prop, 0)) ||
        !step("cuMemAddressReserve", reserve(&va, size, 0, 0, 0)) ||
        !step("cuMemMap", map(va, size, 0, h, 0)) || !step("cuMemRelease", drop(h)))
        return 1;
    step("cuMemAlloc beside the mapping", alloc(&q, size));
    return puts("smoke vmm done"), 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned long long mib = 1;
    const char *path = argc == 3 ? argv[2] : NULL;
    if (argc > 3 || (path && strcmp(path, "vmm") && strcmp(path, "fork")))
        return puts("usage: kubeacc-cuda-smoke [MiB [vmm|fork]]"), 3;
    if (argc >= 2) {
        char *end;
        mib = strtoull(argv[1], &end, 10);
        if (*argv[1] < '0' || *argv[1] > '9' || *end || mib == 0 || mib > (1ULL << 24))
            return printf("not a size in MiB (1-16777216): %s\n", argv[1]), 3;
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return printf("dlopen libcuda.so.1: %s\n", dlerror()), 2;
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))sym(cuda, "cuInit");
    CUresult (*count)(int *) = (CUresult(*)(int *))sym(cuda, "cuDeviceGetCount");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))sym(cuda, "cuDeviceGet");
    CUresult (*ctx)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))sym(cuda, "cuCtxCreate_v2");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym(cuda, "cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))sym(cuda, "cuMemFree_v2");
    CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))sym(cuda, "cuMemGetInfo_v2");
    if (!init || !count || !get || !ctx || !alloc || !release || !info) return 2;
    int n = 0;
    CUdevice dev;
    CUcontext c;
    CUdeviceptr p;
    size_t free_bytes = 0, total_bytes = 0;
    if (!step("cuInit", init(0)) || !step("cuDeviceGetCount", count(&n))) return 1;
    printf("devices %d\n", n);
    if (n < 1) return puts("no CUDA device"), 1;
    if (!step("cuDeviceGet", get(&dev, 0)) || !step("cuCtxCreate", ctx(&c, 0, dev))) return 1;
    if (!step("cuMemGetInfo", info(&free_bytes, &total_bytes))) return 1;
    printf("memory total %zu MiB, free %zu MiB\n", total_bytes >> 20, free_bytes >> 20);
    printf("allocating %llu MiB\n", mib);
    if (!step("cuMemAlloc", alloc(&p, (size_t)(mib << 20))) || !step("cuMemFree", release(p))) return 1;
    puts("smoke ok");
    return path ? way_around(cuda, path, (size_t)(mib << 20), alloc) : 0;
}
