# new_token as a C function, when Cython compiles tokens.py (see hiredlock/_compiled.py):
# lock_steps.pxd cimports it, so that taking a token on every acquire's path is a C call; the
# batch and the index of its next token are C variables (read and written under the GIL, with no
# Python code in between: see tokens.py).

cimport cython

cdef Py_ssize_t _TOKEN_BYTES
cdef Py_ssize_t _BATCH_BYTES
cdef bytes _random
cdef Py_ssize_t _next


# One token: `size` bytes of `random` from `at`, in lowercase hex (as binascii.hexlify writes
# them).
cdef extern from *:
    """
    static inline PyObject *hl_hex_token(PyObject *random, Py_ssize_t at, Py_ssize_t size) {
        static const char pairs[] =  /* each byte's two digits */
            "000102030405060708090a0b0c0d0e0f"
            "101112131415161718191a1b1c1d1e1f"
            "202122232425262728292a2b2c2d2e2f"
            "303132333435363738393a3b3c3d3e3f"
            "404142434445464748494a4b4c4d4e4f"
            "505152535455565758595a5b5c5d5e5f"
            "606162636465666768696a6b6c6d6e6f"
            "707172737475767778797a7b7c7d7e7f"
            "808182838485868788898a8b8c8d8e8f"
            "909192939495969798999a9b9c9d9e9f"
            "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
            "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecf"
            "d0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
            "e0e1e2e3e4e5e6e7e8e9eaebecedeeef"
            "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
        const unsigned char *from = (const unsigned char *)PyBytes_AS_STRING(random) + at;
        PyObject *token = PyBytes_FromStringAndSize(NULL, 2 * size);
        char *to;
        Py_ssize_t i;
        if (token == NULL) return NULL;
        to = PyBytes_AS_STRING(token);
        for (i = 0; i < size; i++) {
            memcpy(to + 2 * i, pairs + 2 * from[i], 2);
        }
        return token;
    }
    """
    object hex_token "hl_hex_token" (bytes random, Py_ssize_t at, Py_ssize_t size)


@cython.locals(at=Py_ssize_t, fresh=bytes)
cpdef bytes new_token()
