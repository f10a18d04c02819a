# The judgement's hot functions as C functions, when Cython compiles judgement.py (see
# hiredlock/_compiled.py): lock_state.pxd and lock_steps.pxd cimport them, so that the judgement of
# every acquire's and release's round is a C call.

cdef int _OK  # (compared in C by oks)

cpdef Py_ssize_t oks(bytes codes)
cpdef bint says_more(bytes codes, bytes quiet) except -1
# (of Python numbers: int() of a C double would make one anyway)
cpdef valid_until_ns(start_ns, ttl_ms, drift)
cpdef bint won(bytes codes, long long elapsed_ns, double ttl_ms, double drift, Py_ssize_t n_quorum)
