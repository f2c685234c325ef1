"""Compiling the core with numba, or not.

``jit`` marks a core function: compiled once (and cached on disk beside the source),
callable from other compiled functions only; ``leaf`` a small one, inlined where it is called.
``entry`` marks the functions Python calls — the compiled loop, the calls the SimPy loop makes,
pricing. Core functions take the run's state as a few typed structures (``struct``: numba
StructRefs, passed as one pointer; each has a NamedTuple view of the same arrays for Python).
Where numba is missing, every function stays plain Python and a structure is its NamedTuple:
the same results, slowly.
"""

from __future__ import annotations

try:
    from numba import njit as _njit
    from numba.core import types as _types
    from numba.experimental import structref as _structref

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised where numba is not installed
    HAVE_NUMBA = False


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
