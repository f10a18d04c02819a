# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# The blocking driver of the algorithm's steps, in C (hiredlock/_engines/blocking.py's run).
#
# The same loop as blocking.run_python: PyIter_Send hands back the generator's return value
# without raising StopIteration, and no Python frame runs between two rounds. The request kinds
# are hiredlock._core.requests' own constants, handed over by set_step_kinds() when
# hiredlock._engines.blocking is imported. Included by engine.pyx.

cdef extern from "Python.h":
    int PyIter_Send(object iterator, object arg, PyObject **presult) except -1
    void Py_DECREF(PyObject *o)
    void Py_INCREF_raw "Py_INCREF" (PyObject *o)
    enum:
        PYGEN_RETURN
        PYGEN_NEXT

cdef int _SET_NX = -1
cdef int _PAUSE = -1

_pause = None


def set_step_kinds(int set_nx, int pause, pause_function):
    """Tells run_steps the request kinds of hiredlock._core.requests and how a pause is waited for
    (called by hiredlock._engines.blocking)."""
    global _SET_NX, _PAUSE, _pause
    _SET_NX = set_nx
    _PAUSE = pause
    _pause = pause_function


def run_steps(steps, pool, list pin=None):
    """Drives a step generator to its end, blocking, on engines from `pool`; see
    hiredlock._engines.blocking.run_python (pin included). A native engine's rounds are called in
    C, without a Python call in between."""
    cdef PyObject *sent = NULL
    cdef int status = PyIter_Send(steps, None, &sent)
    cdef object request, engine, reply
    cdef tuple args
    cdef NativeEngine native
    cdef int kind
    cdef bint owes
    while True:
        request = <object>sent
        Py_DECREF(sent)
        sent = NULL
        if status == PYGEN_RETURN:
            return request
        kind = (<tuple?>request)[0]
        args = (<tuple>request)[1] if kind != _PAUSE else None
        try:
            if kind == _PAUSE:
                _pause((<tuple>request)[1])
                reply = None
            else:
                if pin is None or pin[0] is None:
                    engine = pool.checkout()
                else:  # wait for it about a round: this one's timeout
                    engine = pool.checkout(pin[0], args[3] if kind == _SET_NX else args[4])
                try:
                    if type(engine) is NativeEngine:
                        native = <NativeEngine>engine
                        if kind == _SET_NX:
                            reply = native.set_nx(args[0], args[1], args[2], args[3])
                        else:
                            reply = native.run_script(args[0], args[1], args[2], args[3],
                                                      args[4], args[5], args[6], args[7])
                    elif kind == _SET_NX:
                        reply = engine.set_nx(*args)
                    else:
                        reply = engine.run_script(*args)
                finally:
                    if pin is not None:
                        if type(engine) is NativeEngine:
                            owes = (<NativeEngine>engine).owes_replies()
                        else:
                            owes = engine.owes_replies()
                        pin[0] = engine if owes else None
                    pool.checkin(engine)
        except BaseException as exc:
            try:
                request = steps.throw(exc)
            except StopIteration as stop:
                return stop.value
            sent = <PyObject *>request
            # (a new reference for the DECREF at the top of the loop)
            Py_INCREF_raw(sent)
            status = PYGEN_NEXT
            continue
        status = PyIter_Send(steps, reply, &sent)
