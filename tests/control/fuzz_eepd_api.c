/*
 * fuzz_eepd_api.c - libFuzzer target: bytes into eepd's request decoders and handlers.
 *
 * Byte 0 picks the method (one past the last is "unknown"), byte 1 bit 0 says whether the caller
 * is authenticated; the rest is the request.  One eepd without etcd or network, with TLS and
 * fault injection on so every handler gets past its first gate.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

static eepd_t *fuzz_eepd;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    eepd_config_t cfg;

    (void)argc;
    (void)argv;
    eep_log_set_level(EEP_LOG_LEVEL_NONE);
    if (eep_config_load(&eepd_knob_table, &cfg) != EEP_OK) {
        return 1;
    }
    strcpy(cfg.tls_cert, "/nonexistent/cert.pem");
    cfg.fault_injection = 1;
    return eepd_create(&cfg, 0, &fuzz_eepd) == EEP_OK ? 0 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || fuzz_eepd == NULL) {
        return 0;
    }
    (void)eepd_api_handle(fuzz_eepd, data[0] % (EEPD_M_COUNT + 1), NULL, data + 2, size - 2,
                          data[1] & 1);
    return 0;
}
