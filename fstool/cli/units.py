"""Sizes for people, with no imports: what cli/quick.py (run before click or
anything else loads) and cli/console.py both print."""


def human_bytes(n: int) -> str:
    """``n`` bytes as people read them: 512 B, 4.0 KiB, 1.5 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
