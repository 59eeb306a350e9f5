"""Commands beyond the core ones (``run``, ``replay``, ``show``, ``list``), one module each.

Each module here defines a click command named ``command``; :func:`register` adds
every one of them to the ``dst`` group, in name order, so a new command is a new
module and nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil

import click


def register(group: click.Group) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        command = getattr(module, "command", None)
        if isinstance(command, click.Command):
            group.add_command(command)
