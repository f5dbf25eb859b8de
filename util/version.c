/* version.c - eep_version(): the library's version, from eep/version.h when it was built. */
#include "eep/version.h"

const char *eep_version(void)
{
    return EEP_VERSION_STRING;
}
