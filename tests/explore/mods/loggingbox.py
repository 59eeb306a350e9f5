"""A user module whose name starts with ``logging`` (no dot after it): its objects are state."""


class Box:
    def __init__(self) -> None:
        self.value = 0
