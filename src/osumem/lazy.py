"""Heavy libraries imported at their first use, not when a module of the library is
imported.

``import osumem.memory`` (what an agent, ``osumem query`` and ``osumem serve`` import)
would otherwise load SciPy's sparse matrices (and, through SciPy's array-API layer,
``numpy.testing`` and ``numpy.f2py``), which cost more than NumPy itself while most
calls never touch a sparse matrix. A module that needs one writes

>>> from typing import TYPE_CHECKING
>>> from osumem.lazy import lazy_module
>>> if TYPE_CHECKING:
...     import scipy.sparse as sp
... else:
...     sp = lazy_module("scipy.sparse")

and uses ``sp.csr_matrix`` as before: the first attribute read imports the module.
Unlike :class:`importlib.util.LazyLoader`, nothing is put into :data:`sys.modules`
until the real import, so ``"scipy.sparse" in sys.modules`` still says whether it was
loaded (what ``tests/test_lazy_imports.py`` checks).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """A stand-in for the module ``name``, imported at the first attribute read; each
    attribute read through it is then kept on the stand-in (a plain attribute read
    afterwards)."""

    def __init__(self, name: str) -> None:
        self.__dict__["_lazy_name"] = name

    def _load(self) -> ModuleType:
        return importlib.import_module(self.__dict__["_lazy_name"])

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # copy/pickle/inspect probes: not a reason to import
        value = getattr(self._load(), attr)
        self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy_module(name: str) -> Any:
    """A :class:`LazyModule` for ``name`` (typed ``Any``: the importing module declares
    the real module under ``TYPE_CHECKING`` for the type checker)."""
    return LazyModule(name)
