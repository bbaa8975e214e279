"""Helpers shared by the benchmarks."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_image(given, name, build):
    """``given`` if set, else bench/results/NAME, built with ``build(path)``
    the first time."""
    if given:
        return given
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", name)
    if not os.path.exists(path):
        build(path)
    return path
