"""Compiling the core with numba, or not.

``jit`` marks a core function: compiled once (and cached on disk per user, ``build``),
callable from other compiled functions only; ``leaf`` a small one, inlined where it is called.
``entry`` marks the functions Python calls — the compiled loop, the calls the SimPy loop makes,
pricing. Core functions take the run's state as a few typed structures (``struct``: numba
StructRefs, passed as one pointer; each has a NamedTuple view of the same arrays for Python).
Where numba is missing, every function stays plain Python and a structure is its NamedTuple:
the same results, slowly.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.core.build import CORE_FILES, CORE_STAMP, interpreted, user_cache

HAVE_NUMBA = False  # whether the core is compiled: numba is installed and not turned off (SERVESIM_JIT=0)
if not interpreted():
    from numba import njit as _njit
    from numba.core import types as _types
    from numba.experimental import structref as _structref

    HAVE_NUMBA = True


# Numba's cache checks only a function's own file, so a change to a callee elsewhere would leave a
# caller's stale build in use: here every file of the core stamps every cached function
# (``build.CORE_STAMP``), and any change recompiles them all. The builds live in a folder per user
# named by that stamp (so every checkout of the same core shares one build), or under
# NUMBA_CACHE_DIR when it is set, or beside the source when neither is writable. Builds with
# array bounds checks (NUMBA_BOUNDSCHECK=1, as the tests run) get their own stamp.


if HAVE_NUMBA:
    from numba.core import caching as _caching

    def _public(name: str):  # numba < 0.62 names them with a leading underscore
        return getattr(_caching, name, None) or getattr(_caching, f"_{name}")

    class _CoreStamp:
        def get_source_stamp(self):
            return CORE_STAMP

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.realpath(py_file) not in CORE_FILES:
                return None
            return super().from_function(py_func, py_file)

    class CoreUserProvidedLocator(_CoreStamp, _public("UserProvidedCacheLocator")):
        """The core's builds under NUMBA_CACHE_DIR."""

    class CoreSharedLocator(_CoreStamp, _public("InTreeCacheLocator")):
        """The core's builds in the user's cache, one folder per version of the core."""

        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = str(user_cache() / Path(py_file).resolve().parent.name)

    class CoreInTreeLocator(_CoreStamp, _public("InTreeCacheLocator")):
        """The core's builds beside their source."""

    _public("CacheImpl")._locator_classes[:0] = [CoreUserProvidedLocator, CoreSharedLocator, CoreInTreeLocator]


def jit(fn):
    return _njit(cache=True, no_cpython_wrapper=True, error_model="numpy")(fn) if HAVE_NUMBA else fn


def leaf(fn):
    """A small core function, inlined where it is called rather than compiled on its own."""
    return _njit(inline="always", error_model="numpy")(fn) if HAVE_NUMBA else fn


def entry(fn):
    return _njit(cache=True, error_model="numpy")(fn) if HAVE_NUMBA else fn


def struct(name: str, fields: tuple[str, ...], module: str):
    """A StructRef type with these fields and its Python proxy class, named ``{name}Type`` and
    ``{name}Ref`` in ``module`` (assign them to those names there, so caches can find them).
    Without numba: (None, None)."""
    if not HAVE_NUMBA:
        return None, None

    def preprocess_fields(self, fields):
        return tuple((n, _types.unliteral(t)) for n, t in fields)

    typ = type(f"{name}Type", (_types.StructRef,), {"preprocess_fields": preprocess_fields,
                                                     "__module__": module})
    _structref.register(typ)
    proxy = type(f"{name}Ref", (_structref.StructRefProxy,), {"__module__": module})
    _structref.define_proxy(proxy, typ, list(fields))
    return typ, proxy
