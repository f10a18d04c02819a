# The judgement's hot functions as C functions, when Cython compiles judgement.py (see
# hiredlock/_compiled.py): lock_state.pxd and lock_steps.pxd cimport them, so that the judgement of
# every acquire's and release's round is a C call.

cimport cython

cdef int _OK  # (compared in C by oks)

cpdef Py_ssize_t oks(bytes codes)
cpdef bint says_more(bytes codes, bytes quiet) except -1


# (in C numbers: a ttl is at most MAX_TTL_MS, so the sum stays far inside a long long, and int()
# of the double truncates toward zero as the C cast does)
@cython.locals(span=cython.longlong)
cpdef long long valid_until_ns(long long start_ns, long long ttl_ms, double drift)


cpdef bint won(
    bytes codes, long long elapsed_ns, long long ttl_ms, double drift, Py_ssize_t n_quorum)
