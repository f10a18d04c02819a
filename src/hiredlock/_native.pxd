# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
# Cython looks for the .pxd of the module hiredlock._native here (setup.py puts src on its include
# path); the table of contents itself is _native/engine.pxd, next to the sources it describes.
include "../../_native/engine.pxd"
