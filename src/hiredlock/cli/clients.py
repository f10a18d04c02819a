"""Plain redis-py clients for the command's own reads and writes (not for locks).

No retries: redis-py retries a failed connection 3 times with backoff by default, which makes a
dead server cost seconds, and could run a write twice. The command says what failed instead.
"""

from __future__ import annotations

from typing import Any, Optional


def redis_client(url: Optional[str] = None, **options: Any):
    try:
        import redis
    except ImportError:
        raise SystemExit(
            "hiredlock: this command needs redis-py: pip install 'hiredlock[cli]'"
        ) from None
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options["retry"] = Retry(NoBackoff(), 0)
    if url is not None:
        return redis.Redis.from_url(url, **options)
    return redis.Redis(**options)
