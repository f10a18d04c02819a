# The makers of requests (new_request, new_set_nx, new_run_script) and heard_on as C functions,
# when Cython compiles requests.py (see hiredlock/_compiled.py): lock_state.pxd cimports the
# makers, so that the requests of every lock cycle are made in C, and lock_steps.pxd heard_on,
# read before every attempt of a lock that release notices wake.

# A tuple subtype's instance from a tuple of its items: what tuple.__new__(kind, fields) makes,
# without the call through its Python signature and the copy of `fields`.
cdef extern from *:
    """
    static inline PyObject *hl_request_of(PyTypeObject *kind, PyObject *fields) {
        Py_ssize_t size = PyTuple_GET_SIZE(fields), at;
        PyObject *made = kind->tp_alloc(kind, size);
        if (made == NULL) return NULL;
        for (at = 0; at < size; at++) {
            PyObject *item = PyTuple_GET_ITEM(fields, at);
            Py_INCREF(item);
            PyTuple_SET_ITEM(made, at, item);
        }
        return made;
    }
    """
    object request_of "hl_request_of" (type kind, tuple fields)


# The same from the fields themselves: a SetNx's four, a RunScript's nine.
cdef extern from *:
    """
    static PyObject *hl_request_from(PyTypeObject *kind, Py_ssize_t size, PyObject **items) {
        Py_ssize_t at;
        PyObject *made = kind->tp_alloc(kind, size);
        if (made == NULL) return NULL;
        for (at = 0; at < size; at++) {
            Py_INCREF(items[at]);
            PyTuple_SET_ITEM(made, at, items[at]);
        }
        return made;
    }
    static inline PyObject *hl_set_nx_of(PyTypeObject *kind, PyObject *a, PyObject *b,
                                         PyObject *c, PyObject *d) {
        PyObject *items[4] = {a, b, c, d};
        return hl_request_from(kind, 4, items);
    }
    static inline PyObject *hl_run_script_of(PyTypeObject *kind, PyObject *a, PyObject *b,
                                             PyObject *c, PyObject *d, PyObject *e, PyObject *f,
                                             PyObject *g, PyObject *h, PyObject *i) {
        PyObject *items[9] = {a, b, c, d, e, f, g, h, i};
        return hl_request_from(kind, 9, items);
    }
    """
    object set_nx_of "hl_set_nx_of" (type kind, object a, object b, object c, object d)
    object run_script_of "hl_run_script_of" (
        type kind, object a, object b, object c, object d, object e, object f, object g,
        object h, object i)

cpdef new_request(type kind, tuple fields)
cpdef new_set_nx(keys, tokens, ttl_ms, timeout_ms)
cpdef new_run_script(sha, source, numkeys, argvs, timeout_ms, wait_all, want_values,
                     honour_backoff, acquires)

cpdef heard_on(dict heard, channel)
