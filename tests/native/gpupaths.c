/* The issue-44 paths on the real driver (tests/native/gpupaths.sh runs it with and without the
 * share-limit library): gpupaths vmm|graph|fork|dl, one line per step, CUresults as numbers. */
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
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
#define GIB (1ULL << 30)
static void info(const char *at) {
    size_t f = 0, t = 0;
    int r = cuMemGetInfo_v2(&f, &t);
    printf("%s: info %d free %zu MiB total %zu MiB\n", at, r, f >> 20, t >> 20);
}
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "all";
    CUcontext ctx;
    printf("init %d\n", cuInit(0));
    printf("ctx %d\n", cuDevicePrimaryCtxRetain(&ctx, 0) | cuCtxSetCurrent(ctx));
    info("start");
    CUdeviceptr p, q;
    if (!strcmp(what, "vmm")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = 1, prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id = 0;
        size_t gran = 0;
        cuMemGetAllocationGranularity(&gran, &prop, 0);
        size_t size = 3 * GIB;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        printf("vmm create %d\n", cuMemCreate(&h, size, &prop, 0));
        printf("vmm reserve %d\n", cuMemAddressReserve(&va, size, 0, 0, 0));
        printf("vmm map %d\n", cuMemMap(va, size, 0, h, 0));
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
        printf("vmm access %d\n", cuMemSetAccess(va, size, &acc, 1));
        printf("vmm release %d\n", cuMemRelease(h));
        info("mapped, released");
        printf("alloc 2 GiB while mapped: %d (2 = refused)\n", cuMemAlloc_v2(&p, 2 * GIB));
        printf("vmm unmap %d\n", cuMemUnmap(va, size));
        info("unmapped");
        printf("alloc 2 GiB after unmap: %d\n", cuMemAlloc_v2(&q, 2 * GIB));
    } else if (!strcmp(what, "graph")) {
        CUgraph g;
        CUgraphNode n1, n2;
        printf("graph %d\n", cuGraphCreate(&g, 0));
        CUDA_MEM_ALLOC_NODE_PARAMS prm;
        memset(&prm, 0, sizeof prm);
        prm.poolProps.allocType = 1, prm.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prm.bytesize = 3 * GIB;
        printf("graph alloc node 3 GiB %d\n", cuGraphAddMemAllocNode(&n1, g, NULL, 0, &prm));
        prm.bytesize = 2 * GIB;
        printf("graph alloc node 2 GiB %d (2 = refused)\n", cuGraphAddMemAllocNode(&n2, g, NULL, 0, &prm));
        printf("graph destroy %d\n", cuGraphDestroy(g));
    } else if (!strcmp(what, "fork")) {
        printf("alloc 3 GiB %d\n", cuMemAlloc_v2(&p, 3 * GIB));
        for (int k = 0; k < 2; k++) {
            pid_t pid = k ? vfork() : (pid_t)syscall(SYS_fork);
            if (pid == 0) exit(0);
            waitpid(pid, NULL, 0);
            printf("%s child exited; alloc 2 GiB: %d (2 = refused)\n", k ? "vfork" : "raw fork",
                   cuMemAlloc_v2(&q, 2 * GIB));
        }
    } else if (!strcmp(what, "dl")) {
        printf("alloc 3 GiB %d\n", cuMemAlloc_v2(&p, 3 * GIB));
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        void *(*sym)(void *, const char *) = (void *(*)(void *, const char *))dlvsym(libc, "dlsym", "GLIBC_2.34");
        CUresult (*raw)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym(cuda, "cuMemAlloc_v2");
        printf("dlvsym'd dlsym's cuMemAlloc_v2 2 GiB: %d (2 = refused)\n", raw(&q, 2 * GIB));
        void *h2 = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW);
        printf("dlmopen: %s (%s)\n", h2 ? "loaded" : "refused", h2 ? "" : dlerror());
    }
    return 0;
}
