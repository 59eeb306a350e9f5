"""Whose a module is: the code under test's, whose globals a state's key holds, or not.

The explorer reads the globals of the modules the code under test runs in
(:func:`dst.explore.memory.modules_state`), and writes the objects of some
packages by name alone (:mod:`dst.explore.writer`).  This module tells which is
which: Python's own library and installed packages are not the system under
test; dst's runtime, agents and fakes are, the rest of dst is not; the kernel
and logging stand for themselves by name.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from ..sim.outside import dst_machinery

#: Packages whose objects stand for themselves by class and name: the kernel
#: (its state is in the kernel's part of the key) and logging (never steers code).
#: A module is one of them only at a dot boundary: ``loggingbox`` is user code.
_OPAQUE_PACKAGES = ("dst.sim", "structlog", "logging")


def opaque(module: str | None) -> bool:
    """Whether objects of ``module`` stand for themselves by name (see above)."""
    name = module or ""
    return any(name == p or name.startswith(p + ".") for p in _OPAQUE_PACKAGES)


def _stdlib(module: str | None) -> bool:
    """Whether ``module`` is Python's own (its pickling is faithful to the object)."""
    top = (module or "").partition(".")[0]
    return top in sys.stdlib_module_names or top in ("builtins", "")


#: Where Python's own modules and installed packages live: their globals are not
#: the code under test's (see :func:`watched`).
_INSTALLED = tuple(sorted({os.path.join(p, "") for p in (
    sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    if p}))

#: Module name -> whether its globals are watched.
_WATCHED: dict[str, bool] = {}


def watched(name: str) -> bool:
    """Whether module ``name``'s globals are state of the system under test: code
    outside Python's own library and installed packages (the scenario's modules,
    the user's runtime), and dst's own runtime, agents and fakes."""
    known = _WATCHED.get(name)
    if known is not None:
        return known
    module = sys.modules.get(name)
    if module is None:
        return False  # not imported (yet): nothing of it to read
    path = getattr(module, "__file__", None) or ""
    if name == "dst" or name.startswith("dst."):
        # dst's runtime, agents and fakes are the system under test; the rest is the tester.
        known = not dst_machinery(name)
    else:
        known = (bool(path) and not opaque(name)
                 and not _stdlib(name) and not os.path.abspath(path).startswith(_INSTALLED))
    _WATCHED[name] = known
    return known
