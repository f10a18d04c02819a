# EnginePool as an extension type, when Cython compiles pool.py (see hiredlock/_compiled.py): its
# checkout() and checkin() run around every round, read its fields and its session's in C, and are
# C calls from the blocking client's run_one (blocking.pxd).
# The fields are EnginePool.__slots__ (tests/test_compiled.py checks that both say the same).

from hiredlock._core.session cimport Session

# (fork.py's count, read in C: a list index with no module lookup)
cdef list _fork_generation


cdef class EnginePool:
    cdef public object _factory
    cdef public object _generation
    cdef public object _idle
    cdef public dict _live
    cdef public Py_ssize_t _low_water
    cdef public object _next_trim
    cdef public object _pop
    cdef public object _push
    cdef public object _returned
    cdef public Session _session
    cdef public object _stale
    cdef public Py_ssize_t _waiting  # (read at every checkin)

    cpdef checkout(self, prefer=*, double wait_ms=*)
    cpdef checkin(self, engine)
    # (on the path of every round of a lock whose last round left replies behind: a C call)
    cpdef bint _take(self, object engine, double wait_ms) except -1
