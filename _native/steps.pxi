# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# The blocking driver of the algorithm's steps, in C (hiredlock/_engines/blocking.py's run).
#
# The same loop as blocking.run_python: PyIter_Send hands back the generator's return value
# without raising StopIteration, and no Python frame runs between two rounds. The request types
# are hiredlock._core.requests' own NamedTuples, handed over by set_request_types() when
# hiredlock._engines.blocking is imported; their fields are read at the indexes engine.pxd names.
# Included by engine.pyx.

cdef extern from "Python.h":
    int PyIter_Send(object iterator, object arg, PyObject **presult) except -1
    void Py_DECREF(PyObject *o)
    void Py_INCREF_raw "Py_INCREF" (PyObject *o)
    enum:
        PYGEN_RETURN
        PYGEN_NEXT

REQUEST_FIELDS = {
    "SetNx": {"keys": SET_NX_KEYS, "tokens": SET_NX_TOKENS, "ttl_ms": SET_NX_TTL_MS,
              "timeout_ms": SET_NX_TIMEOUT_MS},
    "RunScript": {"sha": SCRIPT_SHA, "source": SCRIPT_SOURCE, "numkeys": SCRIPT_NUMKEYS,
                  "argvs": SCRIPT_ARGVS, "timeout_ms": SCRIPT_TIMEOUT_MS,
                  "wait_all": SCRIPT_WAIT_ALL, "want_values": SCRIPT_WANT_VALUES,
                  "honour_backoff": SCRIPT_HONOUR_BACKOFF, "acquires": SCRIPT_ACQUIRES},
}

_pause = None


def set_request_types(set_nx, run_script, cleanup, pause, pause_function):
    """Tells run_steps and NativeEngine.run the request types of hiredlock._core.requests and how
    a pause is waited for (called by hiredlock._engines.blocking)."""
    global _SetNx, _RunScript, _Cleanup, _Pause, _pause
    _SetNx = set_nx
    _RunScript = run_script
    _Cleanup = cleanup
    _Pause = pause
    _pause = pause_function


cdef object _run_request(object checkout, object checkin, object request, list pin):
    """One request's round on an engine from the pool (or its pause): the reply. See
    hiredlock._engines.blocking.run_one (pin included)."""
    cdef object kind = type(request)
    cdef object engine, reply
    cdef tuple args
    cdef NativeEngine native
    cdef bint owes, is_set
    if kind is _Pause:
        _pause(request)
        return None
    if not isinstance(request, tuple):
        raise TypeError(f"not a request: {request!r}")
    args = <tuple>request
    is_set = kind is _SetNx
    if pin is None or pin[0] is None:
        engine = checkout()
    else:  # wait for it about a round: this one's timeout
        engine = checkout(pin[0], args[SET_NX_TIMEOUT_MS] if is_set else args[SCRIPT_TIMEOUT_MS])
    try:
        if type(engine) is NativeEngine:
            native = <NativeEngine>engine
            if is_set:
                reply = native.set_nx(args[SET_NX_KEYS], args[SET_NX_TOKENS],
                                      args[SET_NX_TTL_MS], args[SET_NX_TIMEOUT_MS])
            else:
                reply = native.run_script(
                    args[SCRIPT_SHA], args[SCRIPT_SOURCE], args[SCRIPT_NUMKEYS],
                    args[SCRIPT_ARGVS], args[SCRIPT_TIMEOUT_MS],
                    args[SCRIPT_WAIT_ALL], args[SCRIPT_WANT_VALUES],
                    args[SCRIPT_HONOUR_BACKOFF], args[SCRIPT_ACQUIRES])
        else:
            reply = engine.run(request)
    finally:
        if pin is not None:
            if type(engine) is NativeEngine:
                owes = (<NativeEngine>engine).owes_replies()
            else:
                owes = engine.owes_replies()
            pin[0] = engine if owes else None
        checkin(engine)
    return reply


def run_steps(pool, steps, list pin=None):
    """Drives a step generator to its end, blocking, on engines from a pool; see
    hiredlock._engines.blocking.run_python (pin included). A native engine's rounds are called
    in C, without a Python call in between."""
    # (bound once per call: each round checks an engine out and back in)
    cdef object checkout = pool.checkout, checkin = pool.checkin
    cdef PyObject *sent = NULL
    cdef int status = PyIter_Send(steps, None, &sent)
    cdef object request, reply
    while True:
        request = <object>sent
        Py_DECREF(sent)
        sent = NULL
        if status == PYGEN_RETURN:
            return request
        try:
            reply = _run_request(checkout, checkin, request, pin)
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
