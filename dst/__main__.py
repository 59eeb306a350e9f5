"""``python -m dst``: the same program as ``dst`` (``dst/launcher.py``)."""

from dst.launcher import main

if __name__ == "__main__":  # not when a spawned worker process imports this module
    main()
