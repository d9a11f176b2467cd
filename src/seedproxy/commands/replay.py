"""``seedproxy verify``: ask a running proxy to replay a session and print the verdict.

Exit 0 when every interaction matched, 1 at the first divergence (printed as one line).
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from ..errors import ConfigError

__all__ = ["verify_session"]

EXIT_DIVERGED = 1


def verify_session(url: str, session_id: str, *, admin_key: str | None) -> int:
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
    target = f"{url.rstrip('/')}/sessions/{quote(session_id, safe='')}/verify"
    try:
        response = httpx.post(target, headers=headers, timeout=None)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise ConfigError(f"{url} answered {response.status_code}: {response.text[:200]}")
    report = response.json()
    divergence = report["first_divergence"]
    if divergence is None:
        print(f"{session_id}: verified {report['checked']} interactions "
              f"({report['skipped']} skipped): tokens and logprobs identical")
        return 0
    expected, got = divergence["expected"], divergence["got"]
    print(f"{session_id}: DIVERGED at request_index {divergence['request_index']} "
          f"({divergence['interaction_id']}), choice {divergence['choice']}, position "
          f"{divergence['position']}: expected token {expected['token_id']} "
          f"(logprob {expected['logprob']}), got {got['token_id']} (logprob {got['logprob']})")
    return EXIT_DIVERGED
