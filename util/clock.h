/*
 * util/clock.h - the one monotonic clock of the host code: deadlines, timeouts and elapsed
 * times (never wall time; logs stamp their own).  In the util base, so every binary has it.
 */
#ifndef EEP_ELASTIC_CLOCK_H
#define EEP_ELASTIC_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/** Milliseconds on CLOCK_MONOTONIC (fractional: microsecond resolution). */
double eep_clock_ms(void);

#ifdef __cplusplus
}
#endif

#endif /* EEP_ELASTIC_CLOCK_H */
