# _Batch and AsyncRounds as extension types, when Cython compiles _rounds.py (see
# hiredlock/_compiled.py): every round a task asks for goes through AsyncRounds._submit and
# _ended, and reads their fields in C. The fields are their __slots__ (tests/test_compiled.py
# checks that both say the same). The methods below are called in C within this module (the
# cdef ones only from it).

from hiredlock._core.session cimport Session
from hiredlock.aio._driver cimport Driver


# send_step's generator send, without StopIteration (as _native/steps.pxi's run_steps)
cdef extern from "Python.h":
    ctypedef struct PyObject
    int PyIter_Send(object iterator, object arg, PyObject **presult) except -1
    void Py_DECREF(PyObject *o)
    enum:
        PYGEN_NEXT

cpdef bint send_step(object steps, object value, list out) except -1


cdef class AsyncRounds


cdef class _Batch:
    cdef public object done
    cdef public object engine
    cdef public bint flushed
    cdef public list futures
    cdef public bint over
    cdef public list requests
    cdef public object rnd
    cdef public AsyncRounds rounds
    cdef public list slices

    cpdef end(self)


cdef class AsyncRounds:
    cdef public Session _session
    cdef public object _loop
    cdef public bint _plain_futures
    cdef public dict _queued
    cdef public object _engine
    cdef public Driver _driver
    cdef public _Batch _in_flight
    cdef public set _tasks
    cdef public object _closing

    cpdef loop(self)
    cdef tuple _submit(self, request)
    cdef _flush(self)
    cdef _send(self, _Batch batch, request)
    cpdef _ended(self, _Batch batch, exc)
