# _Batch and AsyncRounds as extension types, when Cython compiles _rounds.py (see
# hiredlock/_compiled.py): every round a task asks for goes through AsyncRounds._submit and
# _ended, and reads their fields in C. The fields are their __slots__ (tests/test_compiled.py
# checks that both say the same).

from hiredlock._core.session cimport Session
from hiredlock.aio._driver cimport Driver


cdef class _Batch:
    cdef public object done
    cdef public bint flushed
    cdef public list futures
    cdef public bint over
    cdef public list requests
    cdef public list slices


cdef class AsyncRounds:
    cdef public Session _session
    cdef public object _loop
    cdef public dict _queued
    cdef public object _engine
    cdef public Driver _driver
    cdef public _Batch _in_flight
    cdef public set _tasks
    cdef public object _closing
