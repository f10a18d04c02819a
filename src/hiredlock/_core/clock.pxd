# The clocks as C functions, when Cython compiles clock.py (see hiredlock/_compiled.py):
# lock_state.pxd and lock_steps.pxd cimport monotonic_ns, so that reading the clock on every
# acquire's and release's path is a C call.

cdef list _monotonic
cdef list _wall

cpdef monotonic_ns()
cpdef time_ns()
