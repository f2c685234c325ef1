"""Compiling the core with numba, or not.

``jit`` marks a core function: compiled once (and cached on disk per user, ``buildcache``),
callable from other compiled functions only; ``leaf`` a small one, inlined where it is called.
``entry`` marks the functions Python calls — the compiled loop, the calls the SimPy loop makes,
pricing. Core functions take the run's state as a few typed structures (``struct``: numba
StructRefs, passed as one pointer; each has a NamedTuple view of the same arrays for Python).
Where numba is missing, every function stays plain Python and a structure is its NamedTuple:
the same results, slowly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sim.core.buildcache import CORE_FILES, CORE_STAMP, build_folder, interpreted, note

HAVE_NUMBA = False  # whether the core is compiled: numba is installed and not turned off (SERVESIM_JIT=0)
if not interpreted():
    from numba import njit as _njit
    from numba.core import types as _types
    from numba.experimental import structref as _structref

    HAVE_NUMBA = True


# Numba's cache checks only a function's own file, so a change to a callee elsewhere would leave a
# caller's stale build in use: here every file of the core stamps every cached function
# (``buildcache.CORE_STAMP``), and any change recompiles them all. The builds live in one folder
# (``buildcache.build_folder``: NUMBA_CACHE_DIR, the user's cache, or a temporary one), one
# subfolder per package, so every checkout of the same core shares one build. Builds with array
# bounds checks (NUMBA_BOUNDSCHECK=1, as the tests run) get their own stamp. A cache entry that
# cannot be read back (a truncated file) is removed and compiled again, and one that cannot be
# written leaves the run uncached: the build never stops a run.


if HAVE_NUMBA:
    from numba.core import caching as _caching

    def _public(name: str):  # numba < 0.62 names them with a leading underscore
        return getattr(_caching, name, None) or getattr(_caching, f"_{name}")

    class _Stamp:
        def get_source_stamp(self):
            return CORE_STAMP

    class CoreBuildLocator(_Stamp, _public("InTreeCacheLocator")):
        """The core's builds in ``build_folder()``, one subfolder per package (core, pricing, loops)."""

        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = str(build_folder() / Path(py_file).resolve().parent.name)

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.realpath(py_file) not in CORE_FILES:
                return None
            return super().from_function(py_func, py_file)

    _public("CacheImpl")._locator_classes[:0] = [CoreBuildLocator]

    class SafeFunctionCache(_caching.FunctionCache):
        """A core function's cache that a broken entry or a failed write cannot stop: what cannot
        be loaded is removed (then compiled and saved again), what cannot be saved is skipped."""

        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except Exception as e:  # a truncated or corrupt index or data file: EOFError, UnpicklingError, ...
                self._forget()
                note(f"servesim: a broken entry of the compiled build in {self._cache_path} ({type(e).__name__}: "
                     f"{e}) was removed and is being compiled again", "broken")
                return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except Exception as e:  # disk full, folder gone, an index that cannot be read
                self._forget()
                note(f"servesim: could not save the compiled build in {self._cache_path} ({type(e).__name__}: "
                     f"{e}); this run goes on, and the next compiles again", "unsaved")

        def _forget(self) -> None:
            """Remove this function's index, so that its data files are no longer read."""
            with contextlib.suppress(OSError):
                os.unlink(self._cache_file._index_path)


def _safe(dispatcher):
    if isinstance(getattr(dispatcher, "_cache", None), _caching.FunctionCache):
        dispatcher._cache.__class__ = SafeFunctionCache
    return dispatcher


def jit(fn):
    return _safe(_njit(cache=True, no_cpython_wrapper=True, error_model="numpy")(fn)) if HAVE_NUMBA else fn


def leaf(fn):
    """A small core function, inlined where it is called rather than compiled on its own."""
    return _njit(inline="always", error_model="numpy")(fn) if HAVE_NUMBA else fn


def entry(fn):
    return _safe(_njit(cache=True, error_model="numpy")(fn)) if HAVE_NUMBA else fn


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
