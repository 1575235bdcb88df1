/* A stand-in CUDA driver (libcuda.so.1) and NVML (libnvidia-ml.so.1, built with -DSTUB_NVML) for
 * the share-limit library's tests: the covered entry points with the driver API's exported names
 * and signatures, device memory as address ranges handed out from a counter (never touched, so
 * a test can "allocate" gigabytes), each device's capacity enforced as a driver would.
 *
 *   KUBEACC_STUB_GPUS  the GPUs, "BUS-ID=MiB,..." (default one GPU, 0000:3b:00.0 with 16384 MiB)
 *
 * Contexts: cuCtxCreate_v2/cuCtxSetCurrent make a device current for the calling thread. */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPU 8

static struct {
    char bus[32];
    unsigned dom, bus_no, dev;
    unsigned long long total, used;
} gpu[MAX_GPU];
static int ngpu;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void) {
    const char *env = getenv("KUBEACC_STUB_GPUS");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env && *env ? env : "0000:3b:00.0=16384");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && ngpu < MAX_GPU;
         t = strtok_r(NULL, ",", &save)) {
        unsigned long long mib = 0;
        char *eq = strchr(t, '=');
        if (!eq || sscanf(eq + 1, "%llu", &mib) != 1) continue;
        *eq = 0;
        snprintf(gpu[ngpu].bus, sizeof gpu[ngpu].bus, "%s", t);
        unsigned fn;
        sscanf(t, "%x:%x:%x.%x", &gpu[ngpu].dom, &gpu[ngpu].bus_no, &gpu[ngpu].dev, &fn);
        gpu[ngpu++].total = mib << 20;
    }
}
static void ready(void) { pthread_once(&once, setup); }

#ifndef STUB_NVML
typedef struct CUctx_st *CUcontext;
static __thread int current = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Allocations: handle -> (device, size); the most recent at the end (frees are usually LIFO). */
static struct alloc {
    unsigned long long handle, size;
    int dev;
} *allocs;
static size_t nalloc, cap;
static unsigned long long next_addr = 1ULL << 40, next_addr32 = 0x1000;

static CUresult take(int dev, unsigned long long size, unsigned long long *handle, int small) {
    ready();
    if (dev < 0 || dev >= ngpu) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (size > gpu[dev].total - gpu[dev].used) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (nalloc == cap) {
        size_t c = cap ? cap * 2 : 256;
        struct alloc *a = realloc(allocs, c * sizeof *a);
        if (a) allocs = a, cap = c;
        else r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        unsigned long long span = (size + 0xfff) & ~0xfffULL;
        unsigned long long *next = small ? &next_addr32 : &next_addr;
        *handle = *next;
        *next += span;
        gpu[dev].used += size;
        allocs[nalloc++] = (struct alloc){*handle, size, dev};
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult give(unsigned long long handle) {
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = nalloc; i-- > 0;)
        if (allocs[i].handle == handle) {
            gpu[allocs[i].dev].used -= allocs[i].size;
            allocs[i] = allocs[--nalloc];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuInit(unsigned int flags) { return ready(), flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { return ready(), *n = ngpu, CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    ready();
    if (ordinal < 0 || ordinal >= ngpu) return CUDA_ERROR_INVALID_DEVICE;
    return *d = ordinal, CUDA_SUCCESS;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice d) {
    ready();
    (void)flags;
    if (d < 0 || d >= ngpu) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (CUcontext)(uintptr_t)(d + 1);
    current = d;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    current = ctx ? (int)(uintptr_t)ctx - 1 : -1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    if (current < 0) return CUDA_ERROR_INVALID_CONTEXT;
    return *d = current, CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) {
    ready();
    if (d < 0 || d >= ngpu) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(bus, (size_t)len, "%04X:%02X:%02X.0", gpu[d].dom, gpu[d].bus_no, gpu[d].dev);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return take(current, n, p, 0); }
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int n) {
    unsigned long long h;
    CUresult r = take(current, n, &h, 1);
    if (r == CUDA_SUCCESS) *p = (CUdeviceptr_v1)h;
    return r;
}
static size_t pitch_of(size_t w) { return (w + 511) / 512 * 512; }
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e) {
    if (e != 4 && e != 8 && e != 16) return CUDA_ERROR_INVALID_VALUE;
    *pitch = pitch_of(w);
    return take(current, *pitch * h, p, 0);
}
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h,
                                unsigned int e) {
    size_t pt;
    CUdeviceptr q;
    CUresult r = cuMemAllocPitch_v2(&q, &pt, w, h, e);
    if (r == CUDA_SUCCESS) *p = (CUdeviceptr_v1)q, *pitch = (unsigned int)pt;
    return r;
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
    (void)flags;
    return take(current, n, p, 0);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return (void)s, take(current, n, p, 0); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { return cuMemAllocAsync(p, n, s); }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    return (void)pool, (void)s, take(current, n, p, 0);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    return cuMemAllocFromPoolAsync(p, n, pool, s);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return give(p); }
EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) { return give(p); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return (void)s, give(p); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return (void)s, give(p); }

static unsigned long long elem(int format, unsigned int ch) {
    unsigned long long b = format == 0x01 || format == 0x08 ? 1 : format == 0x02 || format == 0x09 || format == 0x10 ? 2 : 4;
    return b * (ch ? ch : 1);
}
static unsigned long long nz(unsigned long long v) { return v ? v : 1; }
#define ARRAY(name, desc_t, depth)                                                               \
    EXPORT CUresult name(CUarray *a, const desc_t *d) {                                          \
        unsigned long long h;                                                                    \
        CUresult r = take(current, nz(d->Width) * nz(d->Height) * nz(depth) * elem(d->Format, d->NumChannels), &h, 0); \
        if (r == CUDA_SUCCESS) *a = (CUarray)(uintptr_t)h;                                       \
        return r;                                                                                \
    }
ARRAY(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 1)
ARRAY(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 1)
ARRAY(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, d->Depth)
ARRAY(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, d->Depth)
EXPORT CUresult cuArrayDestroy(CUarray a) { return give((uintptr_t)a); }
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    unsigned long long h, n = nz(d->Width) * nz(d->Height) * nz(d->Depth) * elem(d->Format, d->NumChannels);
    CUresult r = take(current, levels > 1 ? n * 2 : n, &h, 0);
    if (r == CUDA_SUCCESS) *a = (CUmipmappedArray)(uintptr_t)h;
    return r;
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) { return give((uintptr_t)a); }
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    if (flags || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    return take(prop->location.id, n, h, 0);
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return give(h); }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    ready();
    if (current < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    *total = gpu[current].total, *free_ = gpu[current].total - gpu[current].used;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) *free_ = f > 0xffffffffu ? 0xffffffffu : (unsigned)f, *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    return r;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    ready();
    if (d < 0 || d >= ngpu) return CUDA_ERROR_INVALID_DEVICE;
    return *bytes = gpu[d].total, CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d) {
    size_t t;
    CUresult r = cuDeviceTotalMem_v2(&t, d);
    if (r == CUDA_SUCCESS) *bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    return r;
}

/* cuGetProcAddress: the driver's own entry points, versioned as the driver versions them. */
static const struct { const char *name; void *fn; } own[] = {
#define X(name, args) {#name, (void *)name},
    KUBEACC_CU_FUNCS(X)
#undef X
    {"cuInit", (void *)cuInit}, {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount}, {"cuCtxCreate_v2", (void *)cuCtxCreate_v2},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent}, {"cuCtxGetDevice", (void *)cuCtxGetDevice},
    {"cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId},
};
static const char *const versioned[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                                        "cuDeviceTotalMem", "cuArrayCreate", "cuArray3DCreate", "cuCtxCreate"};
static const char *const per_thread[] = {"cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemFreeAsync"};

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    char want[96];
    snprintf(want, sizeof want, "%s", sym);
    for (size_t i = 0; i < sizeof versioned / sizeof *versioned; i++)
        if (!strcmp(sym, versioned[i]) && version >= 3020) snprintf(want, sizeof want, "%s_v2", sym);
    for (size_t i = 0; i < sizeof per_thread / sizeof *per_thread; i++)
        if (!strcmp(sym, per_thread[i]) && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
            snprintf(want, sizeof want, "%s_ptsz", sym);
    if (!strcmp(sym, "cuGetProcAddress") && version >= 12000) snprintf(want, sizeof want, "cuGetProcAddress_v2");
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(own[i].name, want)) {
            *pfn = own[i].fn;
            if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags) {
    return cuGetProcAddress_v2(sym, pfn, version, flags, NULL);
}

#else /* STUB_NVML: memory as the stand-in driver's capacity, nothing in use */
EXPORT nvmlReturn_t nvmlInit_v2(void) { return ready(), NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return ready(), *n = (unsigned)ngpu, NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    ready();
    if (i >= (unsigned)ngpu) return NVML_ERROR_INVALID_ARGUMENT;
    return *d = (nvmlDevice_t)&gpu[i], NVML_SUCCESS;
}
static int gpu_of(nvmlDevice_t d) {
    for (int i = 0; i < ngpu; i++)
        if ((void *)d == (void *)&gpu[i]) return i;
    return -1;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    int i = gpu_of(d);
    if (i < 0 || !pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu[i].dom, pci->bus = gpu[i].bus_no, pci->device = gpu[i].dev;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", gpu[i].dom, gpu[i].bus_no, gpu[i].dev);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    int i = gpu_of(d);
    if (i < 0 || !m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = gpu[i].total, m->free = gpu[i].total, m->used = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    int i = gpu_of(d);
    if (i < 0 || !m || m->version != nvmlMemory_v2) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = gpu[i].total, m->free = gpu[i].total, m->reserved = 0, m->used = 0;
    return NVML_SUCCESS;
}
#endif
