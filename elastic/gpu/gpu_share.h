/*
 * gpu_share.h - which processes use this GPU: a registry of runtimes per GPU in a shared folder.
 *
 * Why: ranks that share one GPU (the one-GPU cluster, MPS co-location) run kernels that spin
 * waiting for one another, so every rank's blocks must be resident at once.  A kernel launched
 * with programmatic dependent launch holds SMs while it waits for the kernel before it, which
 * doubles what each rank keeps resident: at 6 and 8 ranks under MPS every dispatch timed out
 * (bench/RESULTS.md, 2026-12-02 20:55 UTC).  elastic/ep asks how many processes share its GPU
 * and turns that launch off, and shares the SMs out, when it is more than one.
 *
 * How: <dir>/eep-gpu-<uuid>/ holds one file per runtime, named by a random token of its
 * process and a sequence number, locked (flock LOCK_EX) by its maker while it lives.  A count
 * tries a shared lock on each: one that succeeds is left by a dead process (the kernel dropped
 * its lock) and is removed; one that fails is live.  Processes are counted by token, so two
 * runtimes of one process count once.  An entry is made under a dot name, locked, then renamed,
 * so that no count sees it unlocked.  Only processes that see the same folder are counted (one
 * host; containers that share a GPU need the folder shared too).  libc only.
 */
#ifndef EEP_GPU_SHARE_H
#define EEP_GPU_SHARE_H

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eep_gpu_share eep_gpu_share_t;

/**
 * Enter this runtime in the registry of GPU @p uuid under @p dir (made when missing).
 * @param [in] uuid  the GPU's 16-byte UUID (cuDeviceGetUuid; a MIG instance has its own).
 * @param [out] share_p  the entry, for eep_gpu_share_count and eep_gpu_share_leave.
 * @return EEP_OK; EEP_ERR_INVALID_ARG for NULL arguments or an empty @p dir; EEP_ERR_IO
 *         when the folder or the file cannot be made (logged with the path and errno).
 */
eep_status_t eep_gpu_share_join(const char *dir, const unsigned char uuid[16],
                                eep_gpu_share_t **share_p);

/** @return the processes in @p share's registry now, this one included; 1 for NULL. */
int eep_gpu_share_count(eep_gpu_share_t *share);

/** Remove the entry (unlink, unlock).  NULL is a no-op. */
void eep_gpu_share_leave(eep_gpu_share_t *share);

#ifdef __cplusplus
}
#endif

#endif /* EEP_GPU_SHARE_H */
