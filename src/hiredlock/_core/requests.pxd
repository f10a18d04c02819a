# new_request and heard_on as C functions, when Cython compiles requests.py (see
# hiredlock/_compiled.py): lock_state.pxd cimports new_request, so that the requests of every lock
# cycle are made in C, and lock_steps.pxd heard_on, read before every attempt of a lock that
# release notices wake.

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

cpdef new_request(type kind, tuple fields)

cpdef heard_on(dict heard, channel)
