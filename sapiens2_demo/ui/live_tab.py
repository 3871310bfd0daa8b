"""The Live tab (being written)."""


def build_live_tab(ctx) -> None:
    pass
