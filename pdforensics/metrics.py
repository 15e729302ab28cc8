"""The watch's state as Prometheus metrics: `/metrics` over HTTP and node_exporter textfiles.

The exposition is prometheus_client's own. Every value is set from the fold after each poll (a
custom collector would re-read the fold from the HTTP thread while the poll changes it); series
whose label set went away (a host whose requests all completed) are removed, so a scrape shows
the state now. Times are log time: `oldest_open_request_age_seconds` is the newest line's time
less the oldest open request's Receive, so the figures agree with the alerts.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server, write_to_textfile

from pdforensics.livefold import KINDS, LiveFold, S

VERDICTS = ("nothing_stuck", "watchdog_fired", "watchdog_missed", "inconclusive")
_HOLE_KINDS = ("journald_suppression", "engine_down", "engine_silent")


class WatchMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"pdforensics_{name}", doc, labels, registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"pdforensics_{name}", doc, labels, registry=r)

        self._counted: dict[tuple[int, tuple[str, ...]], float] = {}

        self.silent_pins = gauge(
            "silent_pins", "Requests held past timeout + grace with no watchdog line, now."
        )
        self.silent_pins_host = gauge("silent_pins_by_host", "Silent pins now, per prefill host.", ("host",))
        self.open_requests = gauge("open_requests", "Requests the prefill holds now.", ("host",))
        self.oldest_age = gauge(
            "oldest_open_request_age_seconds",
            "Log-time age of the oldest open request, per prefill.",
            ("host",),
        )
        self.floor = gauge(
            "inflight_floor", "Prefill #inflight-req less the batch just run (last sample).", ("host",)
        )
        # Counters (rate() and increase() work on them): the fold's totals, restored from the
        # persisted state after a restart, are what each grows to (`count_to`).
        self.firings = counter("watchdog_firings", "Watchdog firings seen (one per request).")
        self.wedged = gauge(
            "wedged", "1 while the watchdog keeps firing on a prefill and nothing completes there.", ("host",)
        )
        self.holes = counter("coverage_holes", "Coverage holes seen, by kind.", ("kind",))
        self.alerts = counter("alerts", "Alerts raised, by kind.", ("kind",))
        self.unit_age = gauge(
            "unit_last_line_age_seconds", "Seconds since each unit's last line (log time).", ("host", "unit")
        )
        self.verdict = gauge("verdict", "The watch's current verdict (1 for the current one).", ("verdict",))
        self.timeout = gauge("watchdog_timeout_seconds", "The watchdog timeout the rules use.")
        self.lines = counter("lines", "Lines followed and folded.")
        self.log_time = gauge("log_time_seconds", "The newest line's time (UTC epoch seconds).")
        self.pending = gauge("pending_lines", "Lines parsed but not yet written (the database was busy).")
        self.db_busy = counter("database_busy", "Writes deferred because a reader held the database.")
        for k in _HOLE_KINDS:
            self.holes.labels(k)
        for k in KINDS:
            self.alerts.labels(k)

    def update(self, fold: LiveFold, now_us: int, pending_lines: int, db_busy: int) -> None:
        pins = fold.silent_pins()
        self.silent_pins.set(len(pins))
        by_host: dict[str, int] = {}
        for p in pins:
            by_host[p.host] = by_host.get(p.host, 0) + 1
        _replace(self.silent_pins_host, {(h,): n for h, n in by_host.items()})
        opened = fold.open_by_host()
        hosts = set(opened) | set(fold.floors())
        _replace(self.open_requests, {(h,): opened.get(h, (0, 0))[0] for h in hosts})
        _replace(self.oldest_age, {(h,): (now_us - opened[h][1]) / S if h in opened else 0.0 for h in hosts})
        _replace(self.floor, {(h,): f for h, f in fold.floors().items()})
        self.count_to(self.firings, fold.firings_total)
        _replace(
            self.wedged,
            {(h,): 1.0 for h in fold.wedged_hosts()}
            | {(h,): 0.0 for h in fold.episodes if h not in fold.wedged_hosts()},
        )
        for k, n in fold.holes_total.items():
            self.count_to(self.holes, n, k)
        for k, n in fold.alerts_total.items():
            self.count_to(self.alerts, n, k)
        _replace(self.unit_age, {(h, u): max(now_us - t, 0) / S for (h, u), t in fold.units.items()})
        current = fold.live_verdict(now_us)
        for v in VERDICTS:
            self.verdict.labels(v).set(1 if v == current else 0)
        self.timeout.set(fold.timeout_s)
        self.count_to(self.lines, fold.lines_total)
        self.log_time.set((fold.log_us or 0) / S)
        self.pending.set(pending_lines)
        self.count_to(self.db_busy, db_busy)

    def count_to(self, c: Counter, total: float, *labels: str) -> None:
        """Grow `c` to `total` (a counter only grows: a smaller total is a fold restarted anew)."""
        key = (id(c), labels)
        delta = total - self._counted.get(key, 0.0)
        if delta > 0:
            (c.labels(*labels) if labels else c).inc(delta)
            self._counted[key] = total

    def serve(self, listen: str) -> tuple[str, int]:
        """Serve /metrics on HOST:PORT (port 0: a free one); returns where it listens."""
        host, _, port = listen.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        addr = server.server_address
        return str(addr[0]), int(addr[1])

    def write_textfile(self, path: Path) -> None:
        """node_exporter's textfile collector format, written to a temporary file and renamed."""
        write_to_textfile(str(path), self.registry)


def _replace(g: Gauge, values: dict[tuple[str, ...], float]) -> None:
    """Set these label sets and remove the others (a host that has nothing open any more)."""
    for labels in list(g._metrics):  # prometheus_client keeps its children by label tuple
        if labels not in values:
            g.remove(*labels)
    for labels, v in values.items():
        g.labels(*labels).set(v)
