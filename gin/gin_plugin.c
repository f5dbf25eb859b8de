/* gin/gin_plugin.c - the GIN table NCCL looks up (ncclGinPlugin_v11) in PROXY mode: NCCL's GIN
 * progress thread reads the GPU's requests and calls iput/iputSignal/test/ginProgress here.  This
 * file holds the table and the calls that own no object of their own (init, devices,
 * getProperties, finalize); the mesh, registrations and puts have their files.  A development
 * and test transport for N ranks on one GPU: production uses NCCL's own GIN over RDMA, and this
 * library is loaded only when NCCL_NET_PLUGIN names it. */
#include <stdlib.h>
#include <string.h>

#include "gin/gin_int.h"

typedef struct {
    uint32_t magic;
    uint64_t comm_id;
} eep_gin_ctx_t;
#define EEP_GIN_CTX_MAGIC 0x67637478u

static eep_nccl_result_t eep_gin_init(void **ctx, uint64_t comm_id, eep_nccl_logger_t log)
{
    eep_gin_ctx_t *c;

    eep_gin_log_set(log);
    eep_gin_cuda_load(); /* optional: host memory works without it */
    if (ctx == NULL) {
        return EEP_NCCL_SUCCESS;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return EEP_NCCL_SYSTEM_ERROR;
    }
    c->magic   = EEP_GIN_CTX_MAGIC;
    c->comm_id = comm_id;
    *ctx       = c;
    EEP_GIN_INFO("init (comm id 0x%llx, CUDA %s)", (unsigned long long)comm_id,
                 eep_gin_cu.loaded ? "loaded" : "absent");
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_devices(int *ndev)
{
    *ndev = 1;
    return EEP_NCCL_SUCCESS;
}

eep_nccl_result_t eep_gin_props_common(int dev, eep_nccl_net_props_t *props)
{
    if (dev != 0) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    memset(props, 0, sizeof(*props));
    props->pci_path           = NULL; /* attached to the CPU */
    props->speed_mbps         = 100000;
    props->latency_us         = 0;
    props->max_comms          = 1024 * 1024;
    props->net_device_version = 0;
    props->vprops.ndevs       = 1;
    props->vprops.devs[0]     = dev;
    props->max_p2p_bytes      = EEP_NCCL_MAX_NET_SIZE_BYTES;
    props->max_coll_bytes     = EEP_NCCL_MAX_NET_SIZE_BYTES;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_get_properties(int dev, eep_nccl_net_props_t *props)
{
    if (eep_gin_props_common(dev, props) != EEP_NCCL_SUCCESS) {
        return EEP_NCCL_INVALID_ARGUMENT;
    }
    props->name            = "eep_gin";
    props->guid            = 0x6565702d67696e01ull;
    props->ptr_support     = EEP_NCCL_PTR_HOST | EEP_NCCL_PTR_CUDA; /* never DMABUF */
    props->max_recvs       = EEP_GIN_MAX_RECVS; /* a power of two: NCCL's queue size */
    props->net_device_type = EEP_NCCL_NET_DEVICE_GIN_PROXY;
    return EEP_NCCL_SUCCESS;
}

static eep_nccl_result_t eep_gin_finalize(void *ctx)
{
    eep_gin_ctx_t *c = ctx;

    if (c != NULL && c->magic == EEP_GIN_CTX_MAGIC) {
        c->magic = 0;
        free(c);
    }
    return EEP_NCCL_SUCCESS;
}

/* The entry points that touch a comm's CUDA objects run with its work context pushed (gin_cuda.c):
 * our streams live there, and the caller's thread keeps its own context. */
#define EEP_GIN_IN_WORK_CONTEXT(_comm, _call)                                                      \
    do {                                                                                           \
        eep_gin_cuda_scope_t scope_;                                                               \
        eep_nccl_result_t    res_;                                                                 \
                                                                                                   \
        eep_gin_cuda_enter((_comm), &scope_);                                                      \
        res_ = (_call);                                                                            \
        eep_gin_cuda_leave(&scope_);                                                               \
        return res_;                                                                               \
    } while (0)
static eep_nccl_result_t eep_gin_reg_mr_sym_in(void *coll_comm, void *data, size_t size, int type,
                                               uint64_t mr_flags, void **mhandle, void **gin_handle)
{
    EEP_GIN_IN_WORK_CONTEXT(
        coll_comm, eep_gin_reg_mr_sym(coll_comm, data, size, type, mr_flags, mhandle, gin_handle));
}

static eep_nccl_result_t eep_gin_reg_mr_sym_dmabuf_in(void *coll_comm, void *data, size_t size,
                                                      int type, uint64_t offset, int fd,
                                                      uint64_t mr_flags, void **mhandle,
                                                      void **gin_handle)
{
    (void)offset;
    (void)fd; /* not advertised; NCCL does not call it, but if it does the address suffices */
    return eep_gin_reg_mr_sym_in(coll_comm, data, size, type, mr_flags, mhandle, gin_handle);
}

static eep_nccl_result_t eep_gin_dereg_mr_sym_in(void *coll_comm, void *mhandle)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm, eep_gin_dereg_mr_sym(coll_comm, mhandle));
}

static eep_nccl_result_t eep_gin_close_coll_in(void *coll_comm)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm, eep_gin_close_coll(coll_comm));
}

static eep_nccl_result_t eep_gin_iput_in(void *coll_comm, uint64_t src_off, void *src_mhandle,
                                         size_t size, uint64_t dst_off, void *dst_mhandle,
                                         uint32_t rank, void **request)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm, eep_gin_iput(coll_comm, src_off, src_mhandle, size, dst_off,
                                                    dst_mhandle, rank, request));
}

static eep_nccl_result_t eep_gin_iput_signal_in(void *coll_comm, uint64_t src_off,
                                                void *src_mhandle, size_t size, uint64_t dst_off,
                                                void *dst_mhandle, uint32_t rank,
                                                uint64_t signal_off, void *signal_mhandle,
                                                uint64_t signal_value, uint32_t signal_op,
                                                void **request)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm,
                            eep_gin_iput_signal(coll_comm, src_off, src_mhandle, size, dst_off,
                                                dst_mhandle, rank, signal_off, signal_mhandle,
                                                signal_value, signal_op, request));
}

static eep_nccl_result_t eep_gin_test_in(void *coll_comm, void *request, int *done)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm, eep_gin_test(coll_comm, request, done));
}

static eep_nccl_result_t eep_gin_progress_in(void *coll_comm)
{
    EEP_GIN_IN_WORK_CONTEXT(coll_comm, eep_gin_progress(coll_comm));
}

__attribute__((visibility("default"))) const eep_nccl_gin_v11_t ncclGinPlugin_v11 = {
    .name              = "eep_gin",
    .init              = eep_gin_init,
    .devices           = eep_gin_devices,
    .get_properties    = eep_gin_get_properties,
    .listen            = eep_gin_listen,
    .connect           = eep_gin_connect,
    .create_context    = NULL, /* GDAKI only */
    .reg_mr_sym        = eep_gin_reg_mr_sym_in,
    .reg_mr_sym_dmabuf = eep_gin_reg_mr_sym_dmabuf_in,
    .dereg_mr_sym      = eep_gin_dereg_mr_sym_in,
    .destroy_context   = NULL,
    .close_coll        = eep_gin_close_coll_in,
    .close_listen      = eep_gin_close_listen,
    .iput              = eep_gin_iput_in,
    .iput_signal       = eep_gin_iput_signal_in,
    .test              = eep_gin_test_in,
    .gin_progress      = eep_gin_progress_in,
    .query_last_error  = NULL,
    .finalize          = eep_gin_finalize,
};
