/*
 * bootstrap.h - libeep's own bootstrap backends behind eep_bootstrap_t (the interface:
 * include/eep/bootstrap_ops.h): a shared directory (bootstrap_file.c) and a TCP rendezvous on rank
 * 0 (bootstrap_tcp.c); the control plane adds etcd with eep_bootstrap_create_ops().
 */
#ifndef EEP_BOOTSTRAP_H
#define EEP_BOOTSTRAP_H

#include <stddef.h>

#include "eep/bootstrap_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backend constructors: fill bs->ops and bs->impl of an already filled eep_bootstrap_t. */
eep_status_t eep_bootstrap_file_init(eep_bootstrap_t *bs, const char *dir);
eep_status_t eep_bootstrap_tcp_init(eep_bootstrap_t *bs, const char *address);

#ifdef __cplusplus
}
#endif

#endif /* EEP_BOOTSTRAP_H */
