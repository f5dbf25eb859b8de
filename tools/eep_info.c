/*
 * eep_info.c - eep-info: what ElasticEP was built with and how it is configured.
 *
 *   eep-info            versions (NCCL compiled and loaded, library path)
 *   eep-info --config   every knob of every module, with its value, default and doc
 */
#include <stdio.h>
#include <string.h>

#include "util/config.h"
#include "elastic/ep/ep_knobs.h"
#include "util/log.h"
#include "elastic/gpu/nccl_util.h"

static int eep_info_usage(FILE *out)
{
    fprintf(out, "usage: eep-info [--config] [--help]\n"
                 "  --config  print every knob with its value, default and documentation\n");
    return out == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    const char  *path = NULL;
    eep_status_t status;
    int          i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            eep_config_check_env();
            return eep_config_print(stdout) == EEP_OK ? 0 : 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            return eep_info_usage(stdout);
        }
        fprintf(stderr, "eep-info: unknown argument '%s'\n", argv[i]);
        return eep_info_usage(stderr);
    }
    eep_config_check_env();
    {
        eep_ep_config_t ep;

        if (eep_config_load(&eep_ep_knob_table, &ep) == EEP_OK) {
            printf("ep transport:  EEP_EP_MODE=%s (auto: direct when every rank is an NVLink/LSA "
                   "peer, hybrid - GIN to other nodes - otherwise; a runtime logs its choice and "
                   "eep_ep_transport() returns it)\n",
                   ep.mode);
        }
    }
    printf("nccl compiled: %d\n", NCCL_VERSION_CODE);
    status = eep_nccl_check_version(&path);
    printf("nccl loaded:   %s (%s)\n", path,
           status == EEP_OK ? "matches" : eep_status_string(status));
    return status == EEP_OK ? 0 : 1;
}
