/* util/fd_count.h - this process's open file descriptors: what eep-rank reports after each view
 * and what the tests that check a teardown gives every fd back count (C and C++, header only:
 * the GIN plugin's tests link no library). */
#ifndef EEP_UTIL_FD_COUNT_H
#define EEP_UTIL_FD_COUNT_H

#include <dirent.h>

/* The open fds of this process (the count's own directory fd left out), or -1. */
static inline int eep_open_fds(void)
{
    DIR           *d = opendir("/proc/self/fd");
    struct dirent *e;
    int            n = 0;

    if (d == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n - 1;
}

#endif /* EEP_UTIL_FD_COUNT_H */
