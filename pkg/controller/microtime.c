/* Kubernetes time stamps: metav1.MicroTime and metav1.Time text forms from a Unix time. */
#include "controller/microtime.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

static void split(double t, time_t *sec, long *usec)
{
    double whole = floor(t);
    long us = (long)llround((t - whole) * 1e6);
    if (us >= 1000000) {
        whole += 1;
        us -= 1000000;
    }
    *sec = (time_t)whole;
    *usec = us;
}

void microtime_format(double t, char *out, size_t outlen)
{
    time_t sec;
    long usec;
    struct tm tm;
    split(t, &sec, &usec);
    gmtime_r(&sec, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
}

void microtime_format_seconds(double t, char *out, size_t outlen)
{
    time_t sec = (time_t)floor(t);
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}
