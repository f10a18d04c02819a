# Session as an extension type, when Cython compiles session.py (see hiredlock/_compiled.py): a
# lock's state (lock_state.pxd) and the engine pool (pool.pxd) hold it typed, so that what they
# read of it on every round's path (the quorum, whether it is closed, the locks held) is read in
# C. The fields are Session.__slots__ (tests/test_compiled.py checks that both say the same),
# public: every layer reads them.

from cpython.weakref cimport PyWeakref_NewRef

from hiredlock._core.keys cimport NameKeys
from hiredlock._core.state_mutex cimport StateMutex

# (fork.py's count, read in C: a list index with no module lookup)
cdef list _fork_generation


cdef class Session:
    cdef object __weakref__
    cdef public dict _name_keys
    cdef public object _on_settled
    cdef public object _settled
    cdef public dict _timings
    cdef public object backend
    cdef public bint closed
    cdef public object closing
    cdef public object drift_factor
    cdef public object engine_class
    cdef public object engine_stale
    cdef public object fixed_timeout_ms
    cdef public object generation
    cdef public dict heard
    cdef public set held
    cdef public Py_ssize_t held_bound
    cdef public object label
    cdef public object master_names
    cdef public object masters
    cdef public object mutex
    cdef public object namespace
    cdef public object notices
    cdef public object quiet_acquire
    cdef public object quiet_oks
    cdef public object quiet_wait_all
    cdef public Py_ssize_t quorum  # (compared in C with the oks of every round)
    cdef public object renewals
    cdef public object retry_count
    cdef public object retry_delay
    cdef public object rounds
    cdef public bint rounds_closed
    cdef public StateMutex state_mutex  # (taken in C: see state_mutex.pxd)
    cdef public object tell
    cdef public object turns
    cdef public Py_ssize_t under_way
    cdef public object wake

    # (called in C: by counted_acquire, on every acquire's path, end_acquire by every release too;
    # name_keys and timing by a lock object's __init__, registry_entry by its first acquire)
    cpdef begin_acquire(self)
    cpdef end_acquire(self, Py_ssize_t count=*)
    cpdef NameKeys name_keys(self, name)
    cpdef timing(self, ttl)
    cpdef registry_entry(self, lock)
