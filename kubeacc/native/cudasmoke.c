/* kubeacc-cuda-smoke: the conformance kit's CUDA smoke program (kubeacc selftest, docs/selftest.md).
 *
 * Run in a container that got the driver's user space from a CDI spec, it does what every CUDA
 * program does first, by the driver API's exported names: dlopen("libcuda.so.1") found through
 * the container's ld cache (no LD_LIBRARY_PATH), cuInit, cuDeviceGetCount, a context on device 0,
 * cuMemGetInfo (the total a memory share's library reports), cuMemAlloc of 1 MiB (or of the MiB
 * given as the only argument, to show a share's limit hold) and cuMemFree. One line per step on
 * stdout; the last is "smoke ok" and the exit status 0 when every step passed, else the step that
 * failed with its CUresult and status 1 (2: the library could not be loaded at all; 3: a bad
 * argument). */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned long long mib = 1;
    if (argc > 2) return puts("usage: kubeacc-cuda-smoke [MiB]"), 3;
    if (argc == 2) {
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
    return 0;
}
