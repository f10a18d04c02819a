# LockState as an extension type, when Cython compiles lock_state.py (see hiredlock/_compiled.py):
# its fields are read and written in C by its own methods and LockBase's (lock_steps.pxd), and the
# methods below are called in C from them. The fields are those of LockState.__slots__ (the .py
# runs uncompiled with those; tests/test_layout.py checks that both say the same), public: the
# API classes, the other lock kinds and the batches read them from Python.
#
# Python subclasses (Lock, AsyncLock, the other kinds) may override any method, cpdef ones too.

cimport cython
from hiredlock._core.clock cimport monotonic_ns as _monotonic_ns
from hiredlock._core.judgement cimport (
    oks as _oks,
    says_more as _says_more,
    valid_until_ns as _valid_until_ns,
    won as _round_won,
)
from hiredlock._core.keys cimport NameKeys
from hiredlock._core.local_gate cimport LocalGate
from hiredlock._core.requests cimport new_run_script, new_set_nx
from hiredlock._core.session cimport Session
from hiredlock._core.state_mutex cimport StateMutex

# (fork.py's count, read in C: a list index with no module lookup)
cdef list _fork_generation


cdef class LockState:
    # weak references to lock objects: the session's registry of held locks, a turn's holder
    cdef object __weakref__
    cdef public long long _acquired_at_ns  # (the monotonic ns fields: no int object each time)
    cdef public long long _acquisition
    cdef public object _adopted
    cdef public object _announce
    cdef public object _auto_renew
    cdef public object _blocking_timeout
    cdef public object _channel
    cdef public object _drift_ms
    cdef public object _extensions
    cdef public object _fence
    cdef public object _fencing
    cdef public LocalGate _gate  # (entered and left on every acquire's and release's path)
    cdef public object _generation
    cdef public object _key
    cdef public object _last_codes
    cdef public object _last_votes
    cdef public NameKeys _layout  # (its keys read in C on every acquire)
    cdef public bint _lost
    cdef public object _lost_event
    cdef public object _max_extensions
    cdef public object _max_hold_ns
    cdef public StateMutex _mutex  # (taken in C: see state_mutex.pxd)
    cdef public object _name
    cdef public object _notices
    cdef public object _on_lost
    cdef public object _owner
    cdef public object _pin
    cdef public object _registry_ref
    cdef public object _released_by_close
    cdef public long long _released_ns
    cdef public object _renewed
    cdef public object _rounds
    cdef public Session _session  # (read on every round's path: its quorum, held, closed)
    cdef public object _suffix
    cdef public object _timeout_ms
    cdef public object _token
    cdef public object _told_kind
    cdef public object _trying
    cdef public object _ttl_ms
    cdef public object _unlocked_token
    cdef public long long _valid_until_ns
    cdef public object _won

    # (the name's keys read in C)
    @cython.locals(layout=NameKeys)
    cpdef _setup(self, client, name, ttl, blocking_timeout=*, auto_renew=*, max_hold=*, on_lost=*,
                 max_extensions=*, fencing=*, wake=*, owner=*, token=*)
    cpdef _new_gate(self, mutex=*)
    cdef void _forget(self) noexcept
    cpdef _try_gate(self)
    cpdef _refusal(self, result, elapsed_ns)
    cpdef _release_request(self, token)

    # (the keys of the name, when they are this lock's, made once: see _acquire_request)
    @cython.locals(layout=NameKeys)
    cpdef _acquire_request(self, token)

    # (the gate freed under the same take of the state mutex: see LocalGate.leave_under_mutex)
    @cython.locals(gate=LocalGate, waited=cython.bint)
    cpdef _let_go(self)

    # (the acquisition number in a C integer, as the field; the start as the clock gives it)
    @cython.locals(acquisition=cython.longlong)
    cpdef _took(self, token, long long start, fence, won, began=*, refused=*)
