/* gin/nccl_plugin_abi.h - the slice of NCCL 2.28.9's network-plugin ABI that our plugin exports:
 * the v11 network table (ncclNetPlugin_v11) and the v11 GIN table (ncclGinPlugin_v11), with the
 * property struct both fill.  Written from NCCL's plugin ABI (tag v2.28.9-1, net_v11.h and
 * nccl_net.h); our own names where the ABI does not fix them, the same layouts where it does.
 * The _Static_asserts below pin the sizes and offsets we can derive for x86-64 and aarch64 (LP64):
 * a field moved by mistake fails the build rather than corrupting NCCL's memory.
 * Plain C11; no NCCL header is included, so the plugin builds without NCCL. */
#ifndef EEP_GIN_NCCL_PLUGIN_ABI_H
#define EEP_GIN_NCCL_PLUGIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ncclResult_t: the values the plugin returns (nccl.h). */
typedef enum {
    EEP_NCCL_SUCCESS          = 0,
    EEP_NCCL_UNHANDLED_CUDA   = 1,
    EEP_NCCL_SYSTEM_ERROR     = 2,
    EEP_NCCL_INTERNAL_ERROR   = 3,
    EEP_NCCL_INVALID_ARGUMENT = 4,
    EEP_NCCL_INVALID_USAGE    = 5,
    EEP_NCCL_REMOTE_ERROR     = 6,
    EEP_NCCL_IN_PROGRESS      = 7,
} eep_nccl_result_t;

/* The logger NCCL hands to init (nccl_common.h): level, subsystem mask, file, line, format. */
enum {
    EEP_NCCL_LOG_NONE  = 0,
    EEP_NCCL_LOG_WARN  = 2,
    EEP_NCCL_LOG_INFO  = 3,
    EEP_NCCL_LOG_TRACE = 5,
};
#define EEP_NCCL_SUBSYS_INIT 0x1
#define EEP_NCCL_SUBSYS_NET  0x10
typedef void (*eep_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
                                  const char *fmt, ...);
typedef eep_nccl_result_t (*eep_nccl_profiler_cb_t)(void **event, int type, void *parent,
                                                    int64_t plugin_id, void *ext);

/* Constants of nccl_net.h and net_device.h. */
#define EEP_NCCL_NET_HANDLE_MAXSIZE   128
#define EEP_NCCL_PTR_HOST             0x1
#define EEP_NCCL_PTR_CUDA             0x2
#define EEP_NCCL_PTR_DMABUF           0x4
#define EEP_NCCL_MR_FLAG_FORCE_SO     0x1
#define EEP_NCCL_SIGNAL_OP_INC        0x1
#define EEP_NCCL_SIGNAL_OP_ADD        0x2
#define EEP_NCCL_NET_MAX_REQUESTS     32
#define EEP_NCCL_NET_MAX_DEVS_PER_NIC 4
#define EEP_NCCL_MAX_NET_SIZE_BYTES   (1024L * 1024 * 1024 * 1024)

typedef enum {
    EEP_NCCL_NET_DEVICE_HOST      = 0,
    EEP_NCCL_NET_DEVICE_UNPACK    = 1,
    EEP_NCCL_NET_DEVICE_GIN_PROXY = 2,
    EEP_NCCL_NET_DEVICE_GIN_GDAKI = 3,
} eep_nccl_net_device_type_t;

/* ncclNetDeviceHandle_v11_t: only passed through (we offload nothing to the device). */
typedef struct {
    eep_nccl_net_device_type_t type;
    int                        version;
    void                      *handle;
    size_t                     size;
    int                        needs_proxy_progress;
} eep_nccl_net_dev_handle_t;

typedef struct {
    int ndevs;
    int devs[EEP_NCCL_NET_MAX_DEVS_PER_NIC];
} eep_nccl_vdevice_props_t;

typedef struct {
    int traffic_class;
} eep_nccl_net_comm_config_t;

/* ncclNetProperties_v11_t: filled by both tables' getProperties. */
typedef struct {
    char                      *name;
    char                      *pci_path;
    uint64_t                   guid;
    int                        ptr_support;
    int                        reg_is_global;
    int                        force_flush;
    int                        speed_mbps;
    int                        port;
    float                      latency_us;
    int                        max_comms;
    int                        max_recvs;
    eep_nccl_net_device_type_t net_device_type;
    int                        net_device_version;
    eep_nccl_vdevice_props_t   vprops;
    size_t                     max_p2p_bytes;
    size_t                     max_coll_bytes;
    int                        max_multi_request_size;
} eep_nccl_net_props_t;

typedef struct {
    int32_t max_concurrent_peers, min_concurrent_peers, max_flows_per_peer, min_flows_per_peer;
} eep_nccl_net_comm_attr_t;

typedef struct {
    eep_nccl_net_comm_attr_t send_attr, recv_attr;
    uint32_t                 op, algo, proto;
} eep_nccl_net_attr_t;

/* ncclNet_v11_t: the host network.  Member order is the ABI. */
typedef struct {
    const char *name;
    eep_nccl_result_t (*init)(void **ctx, uint64_t comm_id, eep_nccl_net_comm_config_t *config,
                              eep_nccl_logger_t log, eep_nccl_profiler_cb_t prof);
    eep_nccl_result_t (*devices)(int *ndev);
    eep_nccl_result_t (*get_properties)(int dev, eep_nccl_net_props_t *props);
    eep_nccl_result_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
    eep_nccl_result_t (*connect)(void *ctx, int dev, void *handle, void **send_comm,
                                 eep_nccl_net_dev_handle_t **send_dev_comm);
    eep_nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                                eep_nccl_net_dev_handle_t **recv_dev_comm);
    eep_nccl_result_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
    eep_nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mhandle);
    eep_nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
    eep_nccl_result_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void *phandle, void **request);
    eep_nccl_result_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **phandles, void **request);
    eep_nccl_result_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
    eep_nccl_result_t (*test)(void *request, int *done, int *sizes);
    eep_nccl_result_t (*close_send)(void *send_comm);
    eep_nccl_result_t (*close_recv)(void *recv_comm);
    eep_nccl_result_t (*close_listen)(void *listen_comm);
    eep_nccl_result_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
    eep_nccl_result_t (*irecv_consumed)(void *recv_comm, int n, void *request);
    eep_nccl_result_t (*make_vdevice)(int *d, eep_nccl_vdevice_props_t *props);
    eep_nccl_result_t (*finalize)(void *ctx);
    eep_nccl_result_t (*set_net_attr)(void *ctx, eep_nccl_net_attr_t *attr);
} eep_nccl_net_v11_t;

/* ncclGin_v11_t: GPU-initiated networking, of which NCCL's PROXY backend uses all but
 * create_context, destroy_context and query_last_error.  Member order is the ABI. */
typedef struct {
    const char *name;
    eep_nccl_result_t (*init)(void **ctx, uint64_t comm_id, eep_nccl_logger_t log);
    eep_nccl_result_t (*devices)(int *ndev);
    eep_nccl_result_t (*get_properties)(int dev, eep_nccl_net_props_t *props);
    eep_nccl_result_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
    eep_nccl_result_t (*connect)(void *ctx, void *handles[], int nranks, int rank,
                                 void *listen_comm, void **coll_comm);
    eep_nccl_result_t (*create_context)(void *coll_comm, int n_signals, int n_counters,
                                        void **gin_ctx, eep_nccl_net_dev_handle_t **dev_handle);
    eep_nccl_result_t (*reg_mr_sym)(void *coll_comm, void *data, size_t size, int type,
                                    uint64_t mr_flags, void **mhandle, void **gin_handle);
    eep_nccl_result_t (*reg_mr_sym_dmabuf)(void *coll_comm, void *data, size_t size, int type,
                                           uint64_t offset, int fd, uint64_t mr_flags,
                                           void **mhandle, void **gin_handle);
    eep_nccl_result_t (*dereg_mr_sym)(void *coll_comm, void *mhandle);
    eep_nccl_result_t (*destroy_context)(void *gin_ctx);
    eep_nccl_result_t (*close_coll)(void *coll_comm);
    eep_nccl_result_t (*close_listen)(void *listen_comm);
    eep_nccl_result_t (*iput)(void *coll_comm, uint64_t src_off, void *src_mhandle, size_t size,
                              uint64_t dst_off, void *dst_mhandle, uint32_t rank, void **request);
    eep_nccl_result_t (*iput_signal)(void *coll_comm, uint64_t src_off, void *src_mhandle,
                                     size_t size, uint64_t dst_off, void *dst_mhandle,
                                     uint32_t rank, uint64_t signal_off, void *signal_mhandle,
                                     uint64_t signal_value, uint32_t signal_op, void **request);
    eep_nccl_result_t (*test)(void *coll_comm, void *request, int *done);
    eep_nccl_result_t (*gin_progress)(void *coll_comm);
    eep_nccl_result_t (*query_last_error)(void *gin_ctx, bool *has_error);
    eep_nccl_result_t (*finalize)(void *ctx);
} eep_nccl_gin_v11_t;

/* The exported symbols NCCL looks up by name (dlsym). */
extern const eep_nccl_net_v11_t ncclNetPlugin_v11;
extern const eep_nccl_gin_v11_t ncclGinPlugin_v11;

#if defined(__LP64__)
_Static_assert(sizeof(eep_nccl_net_dev_handle_t) == 32, "ncclNetDeviceHandle_v11_t layout");
_Static_assert(sizeof(eep_nccl_vdevice_props_t) == 20, "ncclNetVDeviceProps_v11_t layout");
_Static_assert(offsetof(eep_nccl_net_props_t, guid) == 16, "ncclNetProperties_v11_t.guid");
_Static_assert(offsetof(eep_nccl_net_props_t, latency_us) == 44, "ncclNetProperties.latency");
_Static_assert(offsetof(eep_nccl_net_props_t, net_device_type) == 56, "ncclNetProperties.type");
_Static_assert(offsetof(eep_nccl_net_props_t, vprops) == 64, "ncclNetProperties.vProps");
_Static_assert(offsetof(eep_nccl_net_props_t, max_p2p_bytes) == 88, "ncclNetProperties.maxP2p");
_Static_assert(offsetof(eep_nccl_net_props_t, max_multi_request_size) == 104,
               "ncclNetProperties.maxMultiRequestSize");
_Static_assert(sizeof(eep_nccl_net_props_t) == 112, "ncclNetProperties_v11_t size");
_Static_assert(sizeof(eep_nccl_net_attr_t) == 44, "ncclNetAttr_v11_t size");
/* 22 members of ncclNet_v11_t (name + 21 functions), 19 of ncclGin_v11_t (name + 18). */
_Static_assert(sizeof(eep_nccl_net_v11_t) == 22 * sizeof(void *), "ncclNet_v11_t size");
_Static_assert(offsetof(eep_nccl_net_v11_t, test) == 13 * sizeof(void *), "ncclNet_v11_t.test");
_Static_assert(offsetof(eep_nccl_net_v11_t, finalize) == 20 * sizeof(void *),
               "ncclNet_v11_t.finalize");
_Static_assert(sizeof(eep_nccl_gin_v11_t) == 19 * sizeof(void *), "ncclGin_v11_t size");
_Static_assert(offsetof(eep_nccl_gin_v11_t, iput) == 13 * sizeof(void *), "ncclGin_v11_t.iput");
_Static_assert(offsetof(eep_nccl_gin_v11_t, gin_progress) == 16 * sizeof(void *),
               "ncclGin_v11_t.ginProgress");
#endif

#endif
