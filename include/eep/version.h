/*
 * eep/version.h - the version of ElasticEP: these headers' and the library's.
 *
 * The Makefile reads the three numbers from here: the shared libraries are libeep.so.MAJOR.MINOR.
 * PATCH with the soname libeep.so.MAJOR (and the same for libeep_agent), the pkg-config files
 * carry EEP_VERSION_STRING, and every tool prints it with --version.  A program can compare the
 * header it was compiled with against the library it runs with: eep_version().
 */
#ifndef EEP_VERSION_H
#define EEP_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define EEP_VERSION_MAJOR  0
#define EEP_VERSION_MINOR  1
#define EEP_VERSION_PATCH  0
#define EEP_VERSION_STRING "0.1.0"

/**
 * @return the version of the library this program runs with, "MAJOR.MINOR.PATCH"; equal to
 *         EEP_VERSION_STRING when headers and library match.
 */
const char *eep_version(void);

#ifdef __cplusplus
}
#endif

#endif /* EEP_VERSION_H */
