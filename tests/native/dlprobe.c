/* Uses the driver as the CUDA runtime does: dlopen("libcuda.so.1") with RTLD_LOCAL, dlsym on
 * that handle for cuGetProcAddress_v2, everything else through it; NVML through dlsym on its
 * own handle. Not linked against either library. Prints one line per step:
 *   alloc <CUresult> (for each MIB argument), info <CUresult> <free MiB> <total MiB>,
 *   nvml <nvmlReturn_t> <total MiB> */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct CUctx_st *CUcontext;
typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *get(proc_fn proc, const char *name) {
    void *fn = NULL;
    if (proc(name, &fn, 12000, 0, NULL) != CUDA_SUCCESS || !fn) {
        printf("missing %s\n", name);
        exit(2);
    }
    return fn;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda || !nvml) return printf("dlopen: %s\n", dlerror()), 2;
    proc_fn proc = (proc_fn)dlsym(cuda, "cuGetProcAddress_v2");
    if (!proc) return puts("no cuGetProcAddress_v2"), 2;
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))get(proc, "cuInit");
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))get(proc, "cuCtxCreate");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))get(proc, "cuMemAlloc");
    CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))get(proc, "cuMemGetInfo");
    CUcontext ctx;
    if (init(0) != CUDA_SUCCESS || ctx_create(&ctx, 0, 0) != CUDA_SUCCESS) return puts("no context"), 2;
    for (int i = 1; i < argc; i++) {
        CUdeviceptr p;
        printf("alloc %d\n", alloc(&p, (size_t)atol(argv[i]) << 20));
    }
    size_t f = 0, t = 0;
    CUresult r = info(&f, &t);
    printf("info %d %zu %zu\n", r, f >> 20, t >> 20);
    nvmlReturn_t (*ninit)(void) = (nvmlReturn_t(*)(void))dlsym(nvml, "nvmlInit_v2");
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    nvmlDevice_t dev;
    nvmlMemory_t m = {0, 0, 0};
    int nr = ninit() | handle(0, &dev) | mem(dev, &m);
    printf("nvml %d %llu\n", nr, m.total >> 20);
    return 0;
}
