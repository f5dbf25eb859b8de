/*
 * eep_info.c - eep-info: what ElasticEP was built with and how it is configured.
 *
 *   eep-info            versions (ElasticEP, NCCL compiled and loaded, library path) and where
 *                       the JIT reads its kernel sources
 *   eep-info --config   every knob of every module, with its value, default and doc
 *   eep-info --version  the version alone
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "eep/version.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/gpu/nccl_util.h"
#include "elastic/jit/jit.h"
#include "util/config.h"
#include "util/log.h"

static int eep_info_usage(FILE *out)
{
    fprintf(out, "usage: eep-info [--config] [--version] [--help]\n"
                 "  --config   print every knob with its value, default and documentation\n"
                 "  --version  print the version of ElasticEP\n");
    return out == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", no_argument, NULL, 'c' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char  *path = NULL;
    char         root[4096];
    eep_status_t status;
    int          c, config = 0;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = 1;
            break;
        case 'V':
            printf("eep-info (ElasticEP) %s\n", eep_version());
            return 0;
        case 'h':
            return eep_info_usage(stdout);
        default:
            fprintf(stderr, "eep-info: unknown option '%s'\n", argv[optind - 1]);
            return eep_info_usage(stderr);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "eep-info: unexpected argument '%s'\n", argv[optind]);
        return eep_info_usage(stderr);
    }
    eep_config_check_env();
    if (config) {
        return eep_config_print(stdout) == EEP_OK ? 0 : 1;
    }
    printf("elasticep:     %s\n", eep_version());
    {
        eep_ep_config_t ep;

        if (eep_config_load(&eep_ep_knob_table, &ep) == EEP_OK) {
            printf("ep transport:  EEP_EP_MODE=%s (auto: direct when every rank is an NVLink/LSA "
                   "peer, hybrid - GIN to other nodes - otherwise; a runtime logs its choice and "
                   "eep_ep_transport() returns it)\n",
                   ep.mode);
        }
    }
    if (eep_jit_default_source_root(root, sizeof(root)) == EEP_OK) {
        printf("kernel source: %s (default; EEP_JIT_SOURCE_ROOT overrides)\n", root);
    }
    printf("nccl compiled: %d\n", NCCL_VERSION_CODE);
    status = eep_nccl_check_version(&path);
    printf("nccl loaded:   %s (%s)\n", path,
           status == EEP_OK ? "matches" : eep_status_string(status));
    return status == EEP_OK ? 0 : 1;
}
