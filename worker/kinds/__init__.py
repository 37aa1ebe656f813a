"""Job kinds: each plans its calls and builds its terminal message; dispatch picks the kind."""

__all__ = [
    "decide",
    "dispatch",
    "image_store",
    "judgments",
    "menus",
    "packs",
]
