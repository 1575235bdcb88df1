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

/* Allocations: handle -> (device, size); the most recent at the end (frees are usually LIFO).
 * Kinds with a life beyond their free, as the driver API documents them:
 *   A_VMM    a cuMemCreate handle: its memory is freed when the handle is released (every
 *            reference: create and each cuMemRetainAllocationHandle) and no mapping is left
 *            ("the memory is freed when all outstanding mappings ... are unmapped and when all
 *            outstanding references to the handle ... are also released");
 *   A_GRAPH  a graph allocation node's memory (taken when the node is added, as if the graph
 *            had run): freed when it was freed (a free node, cuMemFree, cuMemFreeAsync) and
 *            its graph and every executable graph instantiated from it are destroyed. */
enum { A_PLAIN, A_VMM, A_GRAPH };
struct graph {
    int alive, execs;
};
static struct alloc {
    unsigned long long handle, size;
    int dev, kind;
    int refs, maps, freed; /* A_VMM: references and mappings; A_GRAPH: freed */
    struct graph *graph;
} *allocs;
static size_t nalloc, cap;
static unsigned long long next_addr = 1ULL << 40, next_addr32 = 0x1000;

static CUresult take_kind(int dev, unsigned long long size, unsigned long long *handle, int small,
                         int kind, struct graph *g) {
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
        allocs[nalloc++] = (struct alloc){*handle, size, dev, kind, 1, 0, 0, g};
    }
    pthread_mutex_unlock(&lock);
    return r;
}
static CUresult take(int dev, unsigned long long size, unsigned long long *handle, int small) {
    return take_kind(dev, size, handle, small, A_PLAIN, NULL);
}

/* Under the lock: the allocation of this handle and kind, or NULL. */
static struct alloc *find(unsigned long long handle, int kind) {
    for (size_t i = nalloc; i-- > 0;)
        if (allocs[i].handle == handle && allocs[i].kind == kind) return &allocs[i];
    return NULL;
}
/* Under the lock: free the allocation's memory if nothing holds it any more. */
static void settle(struct alloc *a) {
    int gone = a->kind == A_VMM     ? a->refs == 0 && a->maps == 0
               : a->kind == A_GRAPH ? a->freed && !a->graph->alive && !a->graph->execs
                                    : 1;
    if (!gone) return;
    gpu[a->dev].used -= a->size;
    *a = allocs[--nalloc];
}

static CUresult give(unsigned long long handle) {
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    struct alloc *a = find(handle, A_PLAIN);
    if (a) {
        settle(a);
        r = CUDA_SUCCESS;
    } else if ((a = find(handle, A_GRAPH)) && !a->freed) { /* a graph allocation, freed outside */
        a->freed = 1;
        settle(a);
        r = CUDA_SUCCESS;
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
/* Virtual memory management. */
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    if (flags || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    return take_kind(prop->location.id, n, h, 0, A_VMM, NULL);
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    pthread_mutex_lock(&lock);
    struct alloc *a = find(h, A_VMM);
    CUresult r = a && a->refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) a->refs--, settle(a);
    pthread_mutex_unlock(&lock);
    return r;
}
/* Address ranges: reserved from the counter, no memory behind them; mappings: range -> handle. */
static struct mapping {
    unsigned long long va, size, handle;
} maps[1024];
static size_t nmaps;
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
    (void)alignment, (void)addr;
    if (!ptr || !size || flags) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *ptr = next_addr;
    next_addr += (size + 0xfff) & ~0xfffULL;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
/* offset "currently must be zero", flags "must be zero"; the handle must not be released. */
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
    pthread_mutex_lock(&lock);
    struct alloc *a = find(h, A_VMM);
    CUresult r = CUDA_SUCCESS;
    if (!ptr || !size || offset || flags || !a || a->refs == 0 || size > a->size || nmaps == 1024)
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nmaps && r == CUDA_SUCCESS; i++)
        if (ptr < maps[i].va + maps[i].size && maps[i].va < ptr + size) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) maps[nmaps++] = (struct mapping){ptr, size, h}, a->maps++;
    pthread_mutex_unlock(&lock);
    return r;
}
/* "The range must be the entire contiguous address range that was mapped to": whole mappings,
 * one after the other from ptr; their memory is freed once unmapped and released. */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    unsigned long long at = ptr, end = ptr + size;
    size_t found[1024], n = 0;
    while (at < end && r == CUDA_SUCCESS) {
        size_t i = 0;
        while (i < nmaps && maps[i].va != at) i++;
        if (i == nmaps || maps[i].va + maps[i].size > end) r = CUDA_ERROR_INVALID_VALUE;
        else found[n++] = i, at += maps[i].size;
    }
    if (!size) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        /* From the highest index down, so the moved last entries are not ones still to remove. */
        for (size_t k = 0; k < n; k++)
            for (size_t j = k + 1; j < n; j++)
                if (found[j] > found[k]) {
                    size_t t = found[j];
                    found[j] = found[k], found[k] = t;
                }
        for (size_t k = 0; k < n; k++) {
            struct alloc *a = find(maps[found[k]].handle, A_VMM);
            maps[found[k]] = maps[--nmaps];
            if (a) a->maps--, settle(a);
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}
/* A new reference to the handle mapped at addr (each must be released). */
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    unsigned long long va = (uintptr_t)addr;
    for (size_t i = 0; i < nmaps; i++)
        if (va >= maps[i].va && va < maps[i].va + maps[i].size) {
            struct alloc *a = find(maps[i].handle, A_VMM);
            if (a) a->refs++, *h = a->handle, r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Graphs: only what memory nodes need. */
EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int flags) {
    struct graph *n = flags ? NULL : calloc(1, sizeof *n);
    if (!n) return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    n->alive = 1;
    return *g = (CUgraph)n, CUDA_SUCCESS;
}
static CUgraphNode next_node(void) {
    static _Atomic unsigned long node;
    return (CUgraphNode)(uintptr_t)(++node * 16);
}
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    (void)deps, (void)ndeps;
    struct graph *gr = (struct graph *)g;
    if (!node || !gr || !gr->alive || !p || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = take_kind(p->poolProps.location.id, p->bytesize, &p->dptr, 0, A_GRAPH, gr);
    if (r == CUDA_SUCCESS) *node = next_node();
    return r;
}
EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                      CUdeviceptr dptr) {
    (void)deps, (void)ndeps;
    struct graph *gr = (struct graph *)g;
    if (!node || !gr || !gr->alive) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct alloc *a = find(dptr, A_GRAPH);
    CUresult r = a && !a->freed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) a->freed = 1, *node = next_node(); /* freed when its graph runs */
    pthread_mutex_unlock(&lock);
    return r;
}
/* Under the lock: a graph's allocations whose graph (and executables) are gone. */
static void settle_graph(struct graph *gr) {
    for (size_t i = nalloc; i-- > 0;)
        if (allocs[i].kind == A_GRAPH && allocs[i].graph == gr) settle(&allocs[i]);
}
EXPORT CUresult cuGraphDestroy(CUgraph g) {
    struct graph *gr = (struct graph *)g;
    if (!gr || !gr->alive) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    gr->alive = 0;
    settle_graph(gr); /* the record itself is kept: handles are never reused */
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
/* An executable graph: its graph's allocations live while it does. */
struct exec {
    struct graph *graph;
};
static CUresult instantiate(CUgraphExec *e, CUgraph g) {
    struct graph *gr = (struct graph *)g;
    if (!e || !gr || !gr->alive) return CUDA_ERROR_INVALID_VALUE;
    struct exec *x = malloc(sizeof *x);
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    x->graph = gr, gr->execs++;
    pthread_mutex_unlock(&lock);
    return *e = (CUgraphExec)x, CUDA_SUCCESS;
}
EXPORT CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n) {
    (void)err, (void)log, (void)n;
    return instantiate(e, g);
}
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n) {
    return cuGraphInstantiate(e, g, err, log, n);
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
    return (void)flags, instantiate(e, g);
}
EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    CUresult r = instantiate(e, g);
    if (p) p->result_out = r == CUDA_SUCCESS ? 0 : 1;
    return r;
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    return cuGraphInstantiateWithParams(e, g, p);
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
    struct exec *x = (struct exec *)e;
    if (!x) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    x->graph->execs--;
    settle_graph(x->graph);
    pthread_mutex_unlock(&lock);
    free(x);
    return CUDA_SUCCESS;
}

/* What the process holds on a device, in bytes, as the driver counts it (tests only: the
 * memory beyond a share that a program obtained is this less the share). */
EXPORT unsigned long long kubeacc_stub_used(int dev) {
    ready();
    if (dev < 0 || dev >= ngpu) return 0;
    pthread_mutex_lock(&lock);
    unsigned long long u = gpu[dev].used;
    pthread_mutex_unlock(&lock);
    return u;
}

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
    {"cuMemAddressReserve", (void *)cuMemAddressReserve}, {"cuMemAddressFree", (void *)cuMemAddressFree},
    {"cuGraphCreate", (void *)cuGraphCreate},
};
static const char *const versioned[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                                        "cuDeviceTotalMem", "cuArrayCreate", "cuArray3DCreate", "cuCtxCreate"};
static const char *const per_thread[] = {"cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemFreeAsync",
                                         "cuGraphInstantiateWithParams"};

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
    if (!strcmp(sym, "cuGraphInstantiate") && version >= 11000)
        snprintf(want, sizeof want, version >= 12000 ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate_v2");
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
