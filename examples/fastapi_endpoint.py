"""A FastAPI endpoint that ships an order once, whichever replica of the service gets the request.

    HIREDLOCK_MASTERS=redis://10.0.0.1:6379/0,... uvicorn fastapi_endpoint:app

One AsyncRedlock per process, opened and closed with the application (lifespan); a request that
finds the order's lock held answers 409 after waiting up to 2 s for it.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException

from hiredlock import LockNotAcquired
from hiredlock.aio import AsyncRedlock

MASTERS = os.environ["HIREDLOCK_MASTERS"].split(",")
SHIPPED: list[int] = []  # stands in for the service's own storage


async def ship_order(order_id: int) -> None:
    SHIPPED.append(order_id)


@asynccontextmanager
async def lifespan(app: FastAPI):
    async with AsyncRedlock(MASTERS) as app.state.redlock:  # aclose() on shutdown
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/orders/{order_id}/ship")
async def ship(order_id: int) -> dict[str, int]:
    lock = app.state.redlock.lock(f"order:{order_id}", ttl=10, blocking_timeout=2)
    try:
        async with lock:  # the body never runs unlocked
            await ship_order(order_id)  # within the ttl, or lock.extend() / auto_renew=True
    except LockNotAcquired:
        raise HTTPException(409, "this order is being shipped by another request") from None
    return {"shipped": order_id}
