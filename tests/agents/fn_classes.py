"""State on the agent's classes survives every restore: class counters and
registries, a class constant aliasing a module global (`is`), mutable defaults of
methods (plain, classmethod keyword-only, staticmethod), a nested class's counter, an
attribute the job added and one it deleted, an ABC's and a dataclass's class
counters; a local aliasing a class registry stays the same object; Enum members keep
their identity."""

import abc
import enum
from dataclasses import dataclass
from typing import ClassVar

from snapstate import snapshot

LIMITS = {"max": 3}


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Counter:
    count = 0
    registry = []
    LIMITS = LIMITS  # a class constant aliasing a module global
    temp = "deleted by the job"

    def __init__(self, name, tags=[]):
        Counter.count += 1
        Counter.registry.append(name)
        tags.append(name)
        self.name = name
        self.tags = tags

    @classmethod
    def make(cls, name, *, log=[]):
        log.append(name)
        return cls(name)

    @staticmethod
    def norm(x, seen=set()):
        seen.add(x)
        return sorted(seen)

    class Inner:
        hits = 0


class Shape(abc.ABC):
    created = 0

    @abc.abstractmethod
    def area(self): ...


class Square(Shape):
    def __init__(self, side):
        Shape.created += 1
        self.side = side

    def area(self):
        return self.side**2


@dataclass
class Point:
    x: int = 0
    instances: ClassVar[int] = 0

    def __post_init__(self):
        Point.instances += 1


def report(i, reg, limits, first, color):
    print(i, "counter", Counter.count, Counter.registry, reg is Counter.registry, flush=True)
    print(i, "constants", Counter.LIMITS is LIMITS, limits is LIMITS, LIMITS, flush=True)
    print(
        i,
        "methods",
        Counter.__init__.__defaults__[0],
        first.tags is Counter.__init__.__defaults__[0],
        Counter.make.__kwdefaults__["log"],
        Counter.norm(0),
        flush=True,
    )
    print(
        i,
        "other",
        Counter.Inner.hits,
        getattr(Counter, "added", None),
        hasattr(Counter, "temp"),
        Shape.created,
        Point.instances,
        color is Color.RED,
        flush=True,
    )


def main():
    reg = Counter.registry  # a local aliasing a class registry
    limits = Counter.LIMITS
    first = Counter("first")
    color = Color.RED
    for i in range(3):
        Counter.make(f"c{i}")
        Counter.norm(i + 1)
        Counter.Inner.hits += 1
        LIMITS["max"] += 1
        Counter.added = i * 10  # an attribute the job adds at run time
        if i == 1:
            del Counter.temp
        Square(i)
        Point(i)
        snapshot(f"step {i}")
        report(i, reg, limits, first, color)
    Counter.make("last")
    report("end", reg, limits, first, color)
    return f"{Counter.count}-{len(Counter.registry)}-{Shape.created}-{Point.instances}"
