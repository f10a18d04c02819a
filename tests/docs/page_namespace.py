"""What the docs' code blocks call that is the reader's own: `send_invoices()`, `encode(video)`,
`storage.write(data, fence=...)`... Each is a stand-in that records its calls, so a test can tell
that the block's body ran (under its lock) and not only that nothing raised."""

from __future__ import annotations

import threading
from typing import Any


class Calls:
    def __init__(self) -> None:
        self.made: list[tuple[str, tuple[Any, ...]]] = []

    def names(self) -> set[str]:
        return {name for name, _ in self.made}

    def stand_in(self, name: str):
        def call(*args: Any, **kwargs: Any) -> None:
            self.made.append((name, args))

        call.__name__ = name
        return call

    def async_stand_in(self, name: str):
        async def call(*args: Any, **kwargs: Any) -> None:
            self.made.append((name, args))

        call.__name__ = name
        return call


class Catalog:
    def __init__(self, calls: Calls) -> None:
        self.rebuild = calls.stand_in("catalog.rebuild")


class Storage:
    def __init__(self, calls: Calls) -> None:
        self.write = calls.stand_in("storage.write")


# Stand-ins named in the docs whose block only defines the code that would call them (the FastAPI
# endpoint of getting-started.md: examples/fastapi_endpoint.py serves a request to it).
DEFINED_ONLY = frozenset({"ship_order"})


def namespace(calls: Calls) -> dict[str, Any]:
    """The globals a page's blocks start from (the blocks of one page share them, in order)."""
    return {
        "__name__": "docs_page",
        "send_invoices": calls.stand_in("send_invoices"),
        "send_invoices_async": calls.async_stand_in("send_invoices_async"),
        "ship_order": calls.async_stand_in("ship_order"),
        "import_row": calls.stand_in("import_row"),
        "rows": ["row 1", "row 2", "row 3"],
        "cancel_event": threading.Event(),
        "encode": calls.stand_in("encode"),
        "video": "video.mp4",
        "render": calls.stand_in("render"),
        "catalog": Catalog(calls),
        "storage": Storage(calls),
        "data": b"the ledger's new state",
        "hand_over": calls.stand_in("hand_over"),
        "transfer": calls.stand_in("transfer"),
        "transfer_async": calls.async_stand_in("transfer_async"),
        "amount": 250,
    }


STAND_INS = frozenset(
    {
        "send_invoices",
        "send_invoices_async",
        "ship_order",
        "import_row",
        "encode",
        "render",
        "catalog.rebuild",
        "storage.write",
        "hand_over",
        "transfer",
        "transfer_async",
    }
)
