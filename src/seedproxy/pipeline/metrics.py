"""Prometheus metrics, on a registry owned by one app (never the global one)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                    5, 10, 30, 60)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter("seedproxy_requests",
                                "Proxied requests by route, status and upstream.",
                                ["route", "status", "upstream"], registry=registry)
        self.overhead = Histogram("seedproxy_overhead_seconds",
                                  "Time spent in the proxy itself, upstream waits excluded.",
                                  buckets=_OVERHEAD_BUCKETS, registry=registry)
        self.upstream_latency = Histogram("seedproxy_upstream_latency_seconds",
                                          "Time waiting on the upstream, by upstream.",
                                          ["upstream"], buckets=_LATENCY_BUCKETS,
                                          registry=registry)
        self.open_sessions = Gauge("seedproxy_open_sessions", "Sessions not yet ended.",
                                   registry=registry)
        self.recorded_tokens = Counter("seedproxy_recorded_tokens",
                                       "Token ids recorded in interactions.", registry=registry)
        self.failovers = Counter("seedproxy_failovers", "Requests retried on another upstream.",
                                 registry=registry)
        self.replayed = Counter("seedproxy_replayed",
                                "Requests of resumed sessions answered from the record.",
                                registry=registry)
        self.offloaded_parses = Counter("seedproxy_offloaded_parses",
                                        "Bodies parsed in a worker process (offload.py).",
                                        registry=registry)
        self.refusals = Counter(
            "seedproxy_refusals",
            "Requests refused before reaching an upstream, by route, status and reason "
            "(the error's code, param field or type: reason_of in pipeline/admission.py).",
            ["route", "status", "reason"], registry=registry)
        self.tito_prompts = Counter(
            "seedproxy_tito_prompts",
            "Token-in-token-out turns by how the prompt was made (extended, matched, "
            "rendered); a matched turn counts once per named matcher that fired.",
            ["kind", "matcher"], registry=registry)
        self._children: dict[tuple[str, int, str | None], tuple[Any, Any]] = {}

    def count_prompt(self, how: Any) -> None:
        """Count one token-in-token-out turn's ``tito["prompt"]`` (kinds and matcher
        names are a bounded set: ``facets.MATCHERS``)."""
        if not isinstance(how, dict) or not isinstance(how.get("kind"), str):
            return
        names = how.get("matchers") if how["kind"] == "matched" else None
        for name in names if isinstance(names, list) and names else [""]:
            self.tito_prompts.labels(how["kind"], str(name)).inc()

    def observe(self, route: str, status: int, upstream: str | None, overhead_s: float,
                upstream_s: float) -> None:
        # labels() re-validates and re-locks on every call: keep the children per key
        # (a bounded set: routes x statuses x upstreams).
        key = (route, status, upstream)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels(route, str(status), upstream or ""),
                self.upstream_latency.labels(upstream) if upstream else None,
            )
        requests, latency = children
        requests.inc()
        self.overhead.observe(overhead_s)
        if latency is not None:
            latency.observe(upstream_s)

    def refused(self, route: str, status: int, reason: str) -> None:
        self.refusals.labels(route, str(status), reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
