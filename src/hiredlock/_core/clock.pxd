# The clocks as C functions, when Cython compiles clock.py (see hiredlock/_compiled.py):
# lock_state.pxd and lock_steps.pxd cimport monotonic_ns, so that reading the clock on every
# acquire's and release's path is a C call.


# CLOCK_MONOTONIC in ns, what time.monotonic_ns reads where its implementation says so (see
# monotonic_ns); 0, or -1 where the platform has no such clock.
cdef extern from *:
    """
    #include <time.h>
    static inline int hl_read_monotonic_ns(long long *now) {
    #if defined(CLOCK_MONOTONIC) && !defined(_WIN32)
        struct timespec at;
        if (clock_gettime(CLOCK_MONOTONIC, &at) != 0) return -1;
        *now = (long long)at.tv_sec * 1000000000LL + at.tv_nsec;
        return 0;
    #else
        (void)now;
        return -1;
    #endif
    }
    """
    int read_monotonic_ns "hl_read_monotonic_ns" (long long *now)

cdef list _monotonic
cdef object _system_monotonic
cdef list _wall

# (a C integer for the compiled callers, which keep the times they read in C: no int object)
cpdef long long monotonic_ns() except? -1
cpdef time_ns()
