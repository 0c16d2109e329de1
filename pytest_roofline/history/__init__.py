"""History across commits: every measured run as a point, change points per series, a dashboard.

* :mod:`.points` — :class:`HistoryPoint`, one measured result of one run (typed, frozen);
* :mod:`.store` — :class:`HistoryStore`: the embedded JSON-lines store or PostgreSQL, one protocol;
* :mod:`.changepoints` — steps per series (test × device class × conditions) and per layer;
* :mod:`.record` — what the plugin does at session end (append, then report confirmed steps);
* :mod:`.dashboard` — the self-contained HTML dashboard;
* :mod:`.bisect` — the first slower commit by paired runs in temporary git worktrees.

Details: docs/history.md.
"""
