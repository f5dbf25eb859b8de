/*
 * util/clock.h - the clocks of the host code, in one place: the monotonic clock of deadlines,
 * timeouts and elapsed times; wall time only for what a record or a person reads (timestamps in
 * JSON lines and keys); a sleep of so many milliseconds.  In the util base, so every binary has
 * them.
 */
#ifndef EEP_UTIL_CLOCK_H
#define EEP_UTIL_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/** Milliseconds on CLOCK_MONOTONIC (fractional: microsecond resolution). */
double eep_clock_ms(void);

/** Milliseconds since the Unix epoch on CLOCK_REALTIME: for records, never for deadlines. */
long long eep_clock_wall_ms(void);

/** Sleep @p ms milliseconds (fractional; nothing for 0 or less). */
void eep_clock_sleep_ms(double ms);

#ifdef __cplusplus
}
#endif

#endif /* EEP_UTIL_CLOCK_H */
