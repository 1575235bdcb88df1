/* The part of the CUDA driver API and NVML that kube-acc's share-limit library covers:
 * types, constants and prototypes as the public CUDA driver API and NVML references define
 * them (names, signatures and error codes are facts of those ABIs). Shared by the library
 * (sharelimit.c) and the stand-in driver the tests run it against (stubcuda.c). */
#ifndef KUBEACC_CUDA_API_H
#define KUBEACC_CUDA_API_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;       /* CUdeviceptr_v2 */
typedef unsigned int CUdeviceptr_v1;
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUstream_st *CUstream;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500

#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 1ULL
#define CU_MEM_LOCATION_TYPE_DEVICE 1

typedef struct {
    size_t Width, Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
    unsigned int Width, Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;

typedef struct {
    size_t Width, Height, Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct {
    unsigned int Width, Height, Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;

typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;

typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

typedef struct {
    int allocType;   /* CUmemAllocationType */
    int handleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;       /* CUDA 12.2; reserved before */
    unsigned short usage; /* CUDA 12.3; reserved before */
    unsigned char reserved[54];
} CUmemPoolProps;

/* cuGraphAddMemAllocNode's parameters (CUDA 11.4): dptr is set by the call. */
typedef struct {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef struct {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out; /* CUgraphInstantiateResult */
} CUDA_GRAPH_INSTANTIATE_PARAMS;

/* NVML */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* The covered entry points (versioned symbols as libcuda.so.1 exports them). */
#define KUBEACC_CU_FUNCS(X)                                                                    \
    X(cuMemAlloc, (CUdeviceptr_v1 * dptr, unsigned int bytesize))                              \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize))                                    \
    X(cuMemAllocPitch, (CUdeviceptr_v1 * dptr, unsigned int *pitch, unsigned int width,       \
                        unsigned int height, unsigned int elem))                               \
    X(cuMemAllocPitch_v2, (CUdeviceptr * dptr, size_t *pitch, size_t width, size_t height,    \
                           unsigned int elem))                                                 \
    X(cuMemAllocManaged, (CUdeviceptr * dptr, size_t bytesize, unsigned int flags))           \
    X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream s))                     \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream s))                \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool p,          \
                                CUstream s))                                                   \
    X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool p,     \
                                     CUstream s))                                              \
    X(cuMemFree, (CUdeviceptr_v1 dptr))                                                        \
    X(cuMemFree_v2, (CUdeviceptr dptr))                                                        \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s))                                          \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s))                                     \
    X(cuArrayCreate, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR_v1 *d))                        \
    X(cuArrayCreate_v2, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d))                        \
    X(cuArray3DCreate, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d))                    \
    X(cuArray3DCreate_v2, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d))                    \
    X(cuArrayDestroy, (CUarray a))                                                             \
    X(cuMipmappedArrayCreate, (CUmipmappedArray * a, const CUDA_ARRAY3D_DESCRIPTOR *d,        \
                               unsigned int levels))                                           \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray a))                                           \
    X(cuMemCreate, (CUmemGenericAllocationHandle * h, size_t size,                            \
                    const CUmemAllocationProp *prop, unsigned long long flags))               \
    X(cuMemRelease, (CUmemGenericAllocationHandle h))                                          \
    X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, \
                 unsigned long long flags))                                                    \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                              \
    X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle * h, void *addr))           \
    X(cuGraphAddMemAllocNode, (CUgraphNode * node, CUgraph g, const CUgraphNode *deps,        \
                               size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *params))             \
    X(cuGraphAddMemFreeNode, (CUgraphNode * node, CUgraph g, const CUgraphNode *deps,         \
                              size_t ndeps, CUdeviceptr dptr))                                 \
    X(cuGraphDestroy, (CUgraph g))                                                             \
    X(cuGraphInstantiate, (CUgraphExec * e, CUgraph g, CUgraphNode * err, char *log,          \
                           size_t loglen))                                                     \
    X(cuGraphInstantiate_v2, (CUgraphExec * e, CUgraph g, CUgraphNode * err, char *log,       \
                              size_t loglen))                                                  \
    X(cuGraphInstantiateWithFlags, (CUgraphExec * e, CUgraph g, unsigned long long flags))    \
    X(cuGraphInstantiateWithParams, (CUgraphExec * e, CUgraph g,                              \
                                     CUDA_GRAPH_INSTANTIATE_PARAMS * params))                  \
    X(cuGraphInstantiateWithParams_ptsz, (CUgraphExec * e, CUgraph g,                         \
                                          CUDA_GRAPH_INSTANTIATE_PARAMS * params))             \
    X(cuGraphExecDestroy, (CUgraphExec e))                                                     \
    X(cuMemGetInfo, (unsigned int *free, unsigned int *total))                                 \
    X(cuMemGetInfo_v2, (size_t * free, size_t *total))                                         \
    X(cuDeviceTotalMem, (unsigned int *bytes, CUdevice dev))                                   \
    X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                                     \
    X(cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))  \
    X(cuGetProcAddress_v2, (const char *symbol, void **pfn, int cudaVersion,                  \
                            cuuint64_t flags, CUdriverProcAddressQueryResult *status))

#define KUBEACC_NVML_FUNCS(X)                                                                  \
    X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t dev, nvmlMemory_t * mem))                        \
    X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t dev, nvmlMemory_v2_t * mem))

/* What the library calls but does not change. */
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuGraphCreate(CUgraph *g, unsigned int flags);

#define KUBEACC_DECLARE(name, args) CUresult name args;
KUBEACC_CU_FUNCS(KUBEACC_DECLARE)
#undef KUBEACC_DECLARE
#define KUBEACC_DECLARE(name, args) nvmlReturn_t name args;
KUBEACC_NVML_FUNCS(KUBEACC_DECLARE)
#undef KUBEACC_DECLARE

#endif
