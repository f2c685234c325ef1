"""Keep the Triton CPU interpreter working with NumPy >= 2.5.

The interpreter holds every scalar (a kernel argument, ``tl.program_id``, a loaded value) as a
one-element 1-D array, and Triton 3.6's ``tensor.__index__`` converts it with ``int(array)``.
NumPy 2.5 refuses that conversion for arrays with ``ndim > 0``, so any ``range`` with a runtime
bound fails under the interpreter ("only 0-dimensional arrays can be converted to Python
scalars"). Triton 3.7 squeezes the array first; this gives older Triton the same behaviour.
"""

from __future__ import annotations

import inspect

_MARK = "_servesim_scalar_index"


def _index(self) -> int:
    return int(self.handle.data.reshape(-1)[0]) if self.handle.data.size == 1 else int(self.handle.data)


def patch_scalar_index() -> bool:
    """Wrap the interpreter's language patching so ``__index__`` accepts one-element arrays.

    Idempotent; returns False (and changes nothing) when the interpreter's internals do not
    have the expected shape.
    """
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - depends on the environment
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, _MARK, False):
        return original is not None
    if len(inspect.signature(original).parameters) != 2:  # (tensor, scope) in Triton 3.6 / 3.7
        return False

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    setattr(patched, _MARK, True)
    interpreter._patch_lang_tensor = patched
    return True
