"""Plain redis-py clients for the command's own reads and writes (not for locks).

No retries: redis-py retries a failed connection 3 times with backoff by default, which makes a
dead server cost seconds, and could run a write twice. The command says what failed instead.
"""

from __future__ import annotations

from typing import Any, Optional

from .exits import FAILED, CliError

INSTALL_HINT = "this command needs redis-py: pip install 'hiredlock[cli]'"


def need_redis(status: int = FAILED) -> Any:
    """The redis module; CliError with the install hint (exiting with `status`) without it."""
    try:
        import redis
    except ImportError:
        raise CliError(INSTALL_HINT, status) from None
    return redis


def redis_client(url: Optional[str] = None, **options: Any) -> Any:
    redis = need_redis()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options["retry"] = Retry(NoBackoff(), 0)
    if url is not None:
        return redis.Redis.from_url(url, **options)
    return redis.Redis(**options)
