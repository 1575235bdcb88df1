/* kubeacc-cuda-smoke: the conformance kit's CUDA smoke program (kubeacc selftest, docs/selftest.md).
 *
 * Run in a container that got the driver's user space from a CDI spec, it does what every CUDA
 * program does first, by the driver API's exported names: dlopen("libcuda.so.1") found through
 * the container's ld cache (no LD_LIBRARY_PATH), cuInit, cuDeviceGetCount, a context on device 0,
 * cuMemAlloc of 1 MiB and cuMemFree. One line per step on stdout; the last is "smoke ok" and the
 * exit status 0 when every step passed, else the step that failed with its CUresult and status 1
 * (2: the library could not be loaded at all). */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>

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

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return printf("dlopen libcuda.so.1: %s\n", dlerror()), 2;
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))sym(cuda, "cuInit");
    CUresult (*count)(int *) = (CUresult(*)(int *))sym(cuda, "cuDeviceGetCount");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))sym(cuda, "cuDeviceGet");
    CUresult (*ctx)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))sym(cuda, "cuCtxCreate_v2");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym(cuda, "cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))sym(cuda, "cuMemFree_v2");
    if (!init || !count || !get || !ctx || !alloc || !release) return 2;
    int n = 0;
    CUdevice dev;
    CUcontext c;
    CUdeviceptr p;
    if (!step("cuInit", init(0)) || !step("cuDeviceGetCount", count(&n))) return 1;
    printf("devices %d\n", n);
    if (n < 1) return puts("no CUDA device"), 1;
    if (!step("cuDeviceGet", get(&dev, 0)) || !step("cuCtxCreate", ctx(&c, 0, dev))) return 1;
    if (!step("cuMemAlloc", alloc(&p, 1 << 20)) || !step("cuMemFree", release(p))) return 1;
    puts("smoke ok");
    return 0;
}
